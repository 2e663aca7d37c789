// A node that gives up the same job twice (the lifecycle tells: jobs/sql/release.ts) gets a
// strike of its own kind, `give_up`: honest workers give a job up when they stop or lose a
// reply, not twice for the same job, while a node that grabs jobs and lets them go keeps users
// waiting. The strike moves its standing like any other (verify/standing.ts); it takes no
// points back (a job given up earned the node nothing).
import type { Database } from '../db/database.js';
import type { VerifyConfig } from '../config-verify.js';
import { strikeAndReverse } from './standing.js';
import { emptyReport, type AuditReport } from './auditor.js';

export async function strikeGiveUps(
  db: Database,
  giveUps: readonly { nodeId: number; jobId: string }[],
  v: VerifyConfig,
  server = '',
): Promise<AuditReport> {
  return db.transaction(async (tx) => {
    const report = emptyReport();
    for (const g of giveUps) {
      const evidence = { job_id: g.jobId, gave_up: 'the same job a second time' };
      await strikeAndReverse(tx, { nodeId: g.nodeId, jobId: g.jobId, kind: 'give_up', evidence }, v, server, report);
    }
    return report;
  });
}
