// Jobs their nodes failed are audited (docs/verification.md, "Failed jobs"). An error report,
// or a lease held until the job's deadline, counts against its node only once another node
// answered the job (verify/failures.ts): a job nobody could finish is the job's own fault, and
// counting those let any user get a model's nodes suspended. So when no node finished the job —
// distinct nodes' error reports used up its MAX_ATTEMPTS, or a node held it until its deadline —
// nothing counted: three colluding nodes could fail a model's jobs beside an honest node with
// no strike (an outside probe: 39 of 60), and a node could hold every job it took until its
// deadline (16 of 16). Such a job is copied (jobs.verify_of, the original's request) to a node
// that held no lease of it, when one that may run it is online (copies.ts placeCopies). If that
// node answers it, the job could be answered: each failing node's ending counts, as it would
// had the job itself been finished (failures.ts). If the copy fails too, or no node can take
// it, nothing follows. The user's job stays as it ended: its answer was given already.
import { sql, type Database } from '../db/database.js';
import type { Outcome } from '../jobs/outcome.js';
import { queueCopies, type CheckQueue } from './copies.js';
import type { DoneCopy } from './request-errors.js';

/** What a copy made to audit a failed job carries in jobs.suspicion: the nodes whose endings it judges. */
const FAILED_BY = 'failed_by';

export interface FailedJobOptions {
  onlineWindow: number;
  modelsTtl: number;
  jobTimeout: number;
  checks: CheckQueue;
}

/**
 * SQL: lease `l` of job `j` was held until the deadline for at least half the time the job's
 * owner gave it. One taken late (the job waited in the queue: a busy network) is no node's
 * fault, and copying those would add work when the network has least to spare.
 */
export const heldHalf = (l: string, j: string): string =>
  `${l}.outcome = 'deadline' AND 2 * (${l}.ended_at - ${l}.leased_at) >= ${j}.deadline_at - ${j}.submitted_at`;

// Of the jobs $1 that ended failed or expired — users' jobs and probes, not copies, and not
// failed by a request error (audited as a claim: request-errors.ts) — those with no copy yet
// and an error report or a lease held until the deadline (heldHalf), with every node that held
// a lease of each (the copy goes to none of them) and the nodes whose endings the copy judges.
// (A lease that ran out counts without a copy.)
const FAILED = sql(
  'verify_failed_jobs',
  `SELECT j.id::text AS id, j.model_id,
    ARRAY(SELECT DISTINCT h.node_id::int FROM job_leases h WHERE h.job_id = j.id) AS holders,
    ARRAY(SELECT DISTINCT h.node_id::int FROM job_leases h WHERE h.job_id = j.id AND (h.outcome = 'error' OR ${heldHalf('h', 'j')})) AS failed_by
  FROM jobs j WHERE j.id = ANY($1::uuid[]) AND j.state IN ('failed', 'expired') AND j.verify_of IS NULL AND j.error IS NULL
    AND NOT EXISTS (SELECT 1 FROM jobs c WHERE c.verify_of = j.id)`,
);

/** Copies the jobs their nodes failed to another node each, where one is online; answers the outcome to apply once committed, and how many copies were made. */
export async function auditFailedJobs(
  db: Database,
  jobIds: readonly string[],
  o: FailedJobOptions,
): Promise<{ outcome: Outcome | undefined; copies: number }> {
  if (jobIds.length === 0) return { outcome: undefined, copies: 0 };
  return db.transaction(async (tx) => {
    const jobs = (await tx.query<{ id: string; model_id: number; holders: number[]; failed_by: number[] }>(FAILED, [jobIds])).filter(
      (j) => j.failed_by.length > 0,
    );
    // exclude[0] is the node judged (copies.ts placeCopies prefers its quantisation): the first that failed it.
    const plans = jobs.map((j) => ({
      of: j.id,
      modelId: j.model_id,
      exclude: [...new Set([...j.failed_by, ...j.holders])],
      suspicion: { [FAILED_BY]: j.failed_by },
    }));
    const { outcome, made } = await queueCopies(tx, plans, { ...o, deadline: o.jobTimeout });
    return { outcome, copies: made.length };
  });
}

/** Is this copy the audit of a failed job? */
export const auditsFailure = (c: DoneCopy): boolean => Array.isArray(c.suspicion?.[FAILED_BY]);

/** The failures the done audits show to be their nodes': another node answered the job they failed. */
export function failuresShown(copies: readonly DoneCopy[]): { nodeId: number; jobId: string }[] {
  return copies
    .filter(auditsFailure)
    .flatMap((c) =>
      (c.suspicion![FAILED_BY] as unknown[])
        .filter((n): n is number => typeof n === 'number' && n !== c.node_id)
        .map((nodeId) => ({ nodeId, jobId: c.verify_of! })),
    );
}
