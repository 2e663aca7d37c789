// Retention's statements (docs/operations.md, "Retention"). Each is one whole statement, run
// alone (its own short transaction, under PgBouncer's transaction mode too), on a batch of at
// most $3 rows:
// - it takes the transaction-scoped advisory lock RETENTION_LOCK first, with try: while one
//   server prunes, another's statement does nothing and that server stops its round (a
//   session-scoped lock would outlive the transaction on a pooled connection, or be released
//   on another one);
// - it touches only rows past the bound: older than the window ($1 the time, NULL the
//   database's clock; $2 the window in seconds), and never past the ledger's closing: a row of
//   a day not yet closed (ledger_state.closed_through) stays whole, whatever its age, so that
//   retention never runs ahead of the ledger nor of the evidence window in which verification
//   may still compare answers and reverse credits (days close only after it). Before the first
//   day closes, nothing is pruned;
// - it never locks an open job: only final jobs (finished_at set) are chosen, with SKIP LOCKED.
import { sql } from '../db/database.js';

/** The advisory lock of retention (any constant the service uses for nothing else). */
export const RETENTION_LOCK = 0x1e7e_4710;

const LOCKED = `SELECT pg_try_advisory_xact_lock(${RETENTION_LOCK}) AS got`;
const BOUND = `SELECT least(coalesce($1::timestamptz, now()) - make_interval(secs => $2::float8),
    coalesce((s.closed_through + 1)::timestamp AT TIME ZONE 'UTC', '-infinity'::timestamptz)) AS before FROM ledger_state s`;

// Report bodies: the oldest kept bodies past the bound (index job_results_kept_bodies) become
// their hash. The row stays: it is the ledger's entry (job id, node, model, status, points,
// time) and the record exactly-once crediting needs — a repeat of the report finds its job id
// (the primary key) and is compared with the hash (results/recorder.ts): a replay, never a
// second credit. Returns whether the lock was had, and the rows pruned.
export const PRUNE_RESULTS = sql('retention_prune_results', `WITH lock AS (${LOCKED}),
bound AS (${BOUND}),
chosen AS (
  SELECT r.job_id FROM job_results r
  WHERE (SELECT got FROM lock) AND r.result <> 'null'::jsonb AND r.received_at < (SELECT before FROM bound)
  ORDER BY r.received_at LIMIT $3::int FOR UPDATE SKIP LOCKED
),
pruned AS (
  UPDATE job_results r SET result_hash = sha256(convert_to(r.result::text, 'UTF8')), result = 'null'::jsonb
  FROM chosen c WHERE r.job_id = c.job_id
  RETURNING 1
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM pruned) AS rows`);

// Finished jobs: the oldest past the bound (index jobs_finished) are deleted with their leases
// (job_leases: attempts, partial output, usage, the job keys' hashes) — request, answer, usage
// and lease history go. A job the auditor has not taken yet (job_audits) waits for it. Their
// counts stay in job_counts (no trigger on delete), so total_job_count keeps counting them.
// A job key of a deleted lease is unknown from then on: its report is refused (400, credits
// nothing); the job's credit is in job_results, which a node-key report of the same job id
// meets (a replay or a conflict, never a second credit).
export const PRUNE_JOBS = sql('retention_prune_jobs', `WITH lock AS (${LOCKED}),
bound AS (${BOUND}),
chosen AS (
  SELECT j.id FROM jobs j
  WHERE (SELECT got FROM lock) AND j.finished_at IS NOT NULL AND j.finished_at < (SELECT before FROM bound)
    AND j.state IN ('done', 'failed', 'expired', 'canceled')
    AND NOT EXISTS (SELECT 1 FROM job_audits a WHERE a.job_id = j.id)
  ORDER BY j.finished_at LIMIT $3::int FOR UPDATE SKIP LOCKED
),
leases AS (DELETE FROM job_leases l USING chosen c WHERE l.job_id = c.id RETURNING 1),
gone AS (DELETE FROM jobs j USING chosen c WHERE j.id = c.id RETURNING 1)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM gone) AS rows, (SELECT count(*)::int FROM leases) AS leases`);

// The embedded database (PGlite) runs no autovacuum and no checkpointer: after a look that
// deleted rows, the server vacuums the three tables itself, so that their space is reused rather
// than the files grown, and checkpoints, so that the write-ahead log's segments are recycled
// rather than piling up to max_wal_size (1 GB) first. PostgreSQL's own processes do both.
export const VACUUM = sql('retention_vacuum', 'VACUUM jobs, job_leases, job_results');
export const CHECKPOINT = sql('retention_checkpoint', 'CHECKPOINT');
