// Attempts that end by their node's fault — an error report, a lease that ran out, one held
// until the job's deadline (the lifecycle tells: jobs/sql/complete.ts, jobs/sql/sweep.ts) —
// keep that node off the job, and repeated ones count against it: every VERIFY_FAILURES of them
// within the evidence window (since its last `failure` strike, or its reinstatement) is a
// strike of their own kind, `failure`. An honest node fails now and then (its backend
// restarts, a reply is lost); a node that takes jobs and fails them keeps users waiting. The
// strike moves its standing like any other (verify/standing.ts); it takes no points back (a
// failed attempt earned nothing).
// An error report counts once another node finished its job (from when that job finished): a
// job nobody could finish (a prompt past every backend's context, a request its model cannot
// run) is the job's fault, and counting those let any user get the nodes of a model suspended
// with such prompts (an outside probe: 30 of them). complete.ts tells the earlier failing nodes
// when such a job is done. A lease that ran out counts always: silence is no user's doing. A
// job that no node finished (its MAX_ATTEMPTS used up by errors, or held until its deadline) is
// copied to another node (failed-jobs.ts): once that copy is answered, the error reports and
// the lease held until the deadline count as they would had the job been finished, and the
// auditor tells the failing nodes. Only a job that was not done: a done job's error reports
// count from when it was done, and its checks' copies, done later, must not count them again
// after the strike they made. A lease held
// until the deadline counts only when it was held for at least half the time the job's owner
// gave the job, and the copy was done, from its submission, within that half: the deadline is
// the user's to choose, and a node somewhat slower than another must not be made to fail by
// deadlines cut to its speed, nor one that took a job late. (A lease that ran out,
// LEASE_TIMEOUT after it began, counts always.)
import { sql, type Database } from '../db/database.js';
import type { VerifyConfig } from '../config-verify.js';
import { strikeAndReverse } from './standing.js';
import { emptyReport, type AuditReport } from './auditor.js';
import { heldHalf } from './failed-jobs.js';

// $1 node, $2 window (s): its node-owned endings since its last failure strike (or its
// reinstatement) within the window. Leases are found through job_leases_node (node_id,
// leased_at), copies through jobs_verify_of.
const FAILURES = sql(
  'verify_failures_since',
  `WITH since AS (
    SELECT greatest(now() - make_interval(secs => $2::float8),
      coalesce((SELECT max(s.at) FROM node_strikes s WHERE s.node_id = $1::bigint AND s.kind = 'failure'), '-infinity'),
      coalesce((SELECT r.reinstated_at FROM node_standing r WHERE r.node_id = $1::bigint), '-infinity')) AS at)
  SELECT count(*)::int AS n FROM job_leases l, since
  WHERE l.node_id = $1::bigint AND l.leased_at > now() - make_interval(secs => $2::float8)
    AND (l.outcome = 'expired' AND l.ended_at > since.at
      OR l.outcome = 'error' AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = l.job_id AND j.state = 'done' AND j.node_id <> l.node_id AND j.finished_at > since.at)
      OR l.outcome IN ('error', 'deadline') AND EXISTS (SELECT 1 FROM jobs o JOIN jobs c ON c.verify_of = o.id
        WHERE o.id = l.job_id AND o.state <> 'done' AND c.state = 'done' AND c.node_id <> l.node_id AND c.finished_at > since.at
          AND (l.outcome = 'error' OR ${heldHalf('l', 'o')} AND 2 * (c.finished_at - c.submitted_at) <= o.deadline_at - o.submitted_at)))`,
);
// One judgement of a node's failures at a time across servers: the count and its strike in one
// transaction, so two servers told of the same failures strike once. The lock's class (any
// constant the service uses for nothing else) and the node.
const FAILURES_LOCK = 0x696e7374;
const LOCK_NODE = sql('verify_failures_lock', `SELECT pg_advisory_xact_lock(${FAILURES_LOCK}, $1::int)`);

export async function strikeFailures(
  db: Database,
  failures: readonly { nodeId: number; jobId: string }[],
  v: VerifyConfig,
  server = '',
): Promise<AuditReport> {
  return db.transaction(async (tx) => {
    const report = emptyReport();
    if (v.failuresPerStrike <= 0) return report;
    // Each node once, with its latest failed job as the strike's job.
    const last = new Map(failures.map((f) => [f.nodeId, f.jobId]));
    for (const [nodeId, jobId] of [...last].sort((a, b) => a[0] - b[0])) {
      await tx.query(LOCK_NODE, [nodeId]);
      const [{ n }] = (await tx.query<{ n: number }>(FAILURES, [nodeId, v.evidenceWindow])) as [{ n: number }];
      if (n < v.failuresPerStrike) continue;
      const evidence = { job_id: jobId, failed_attempts: n, within_seconds: v.evidenceWindow };
      await strikeAndReverse(tx, { nodeId, jobId, kind: 'failure', evidence }, v, server, report);
    }
    return report;
  });
}
