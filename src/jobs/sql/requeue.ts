// Requeue or fail: a failed attempt — an error report (sql/complete.ts) or a lease that ran out
// (sql/sweep.ts) — is its node's fault (docs/coordinator.md, "Whose fault an attempt's end is").
// The node is kept off the job (exclude_nodes), so each failure is another node's; the job goes
// back to the queue with what the lease streamed kept (the next lease continues it), or fails
// once MAX_ATTEMPTS distinct nodes failed it. One rule, written once and included by both
// statements (as pg-boss's failJobs serves its failure by id and by timeout).

/**
 * The CTE `requeued`: the jobs of the ended leases `ended` (a relation of the including
 * statement with job_id, node_id, attempt, streamed) that `which` (a condition on `e`, the
 * ended lease) names, still leased, requeued or failed; `maxAttempts`, the statement's
 * parameter of MAX_ATTEMPTS (e.g. `$1::int`). Answers each job's id, state, model_id,
 * verify_of, and the lease's attempt and node_id.
 */
export const requeueOrFail = (ended: string, which: string, maxAttempts: string): string => `requeued AS (
  UPDATE jobs j SET
    state = CASE WHEN j.failures + 1 >= ${maxAttempts} THEN 'failed' ELSE 'queued' END,
    failures = j.failures + 1,
    exclude_nodes = CASE WHEN e.node_id = ANY(j.exclude_nodes) THEN j.exclude_nodes ELSE j.exclude_nodes || e.node_id END,
    finished_at = CASE WHEN j.failures + 1 >= ${maxAttempts} THEN now() END,
    detail = CASE WHEN j.failures + 1 >= ${maxAttempts} THEN 'no node finished it in ' || ${maxAttempts} || ' attempts' END,
    streamed = CASE WHEN j.failures + 1 >= ${maxAttempts} THEN '' ELSE e.streamed END,
    node_id = NULL, lease_expires_at = NULL
  FROM ${ended} e WHERE j.id = e.job_id AND ${which} AND j.state = 'leased'
  RETURNING j.id, j.state, j.model_id, j.verify_of, e.attempt, e.node_id
)`;
