// A node that gives up the same job twice (the lifecycle tells: jobs/sql/release.ts) gets a
// strike of its own kind, `give_up`: honest workers give a job up when they stop or lose a
// reply, not twice for the same job, while a node that grabs jobs and lets them go keeps users
// waiting. The strike moves its standing like any other (verify/standing.ts); it takes no
// points back (a job given up earned the node nothing).
import type { Database } from '../db/database.js';
import type { VerifyConfig } from '../config-verify.js';
import { strike } from './standing.js';
import { reverse } from './reversal.js';
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
      const { before, after } = await strike(
        tx,
        g.nodeId,
        g.jobId,
        'give_up',
        { job_id: g.jobId, gave_up: 'the same job a second time' },
        v.evidenceWindow,
        v.strikesToSuspend,
        server,
      );
      report.strikes.push({ kind: 'give_up', nodeId: g.nodeId });
      if (after === 'suspended' && before !== 'suspended') {
        const r = await reverse(tx, { nodes: [{ nodeId: g.nodeId, seconds: v.evidenceWindow }] }, 'suspended');
        report.suspended.push({ nodeId: g.nodeId, ...r });
        report.reversedPoints += r.points;
      }
    }
    return report;
  });
}
