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
export const PRUNE_RESULTS = sql(
  'retention_prune_results',
  `WITH lock AS (${LOCKED}),
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
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM pruned) AS rows`,
);

// Finished jobs: the oldest past the bound (index jobs_finished) are deleted with their leases
// (job_leases: attempts, partial output, usage, the job keys' hashes) — request, answer, usage
// and lease history go. A job the auditor has not taken yet (job_audits) waits for it. Their
// counts stay in job_counts (no trigger on delete), so total_job_count keeps counting them
// (the users' jobs: copies and probes are not counted, migrations/0027).
// A job key of a deleted lease is unknown from then on: its report is refused (400, credits
// nothing); the job's credit is in job_results, which a node-key report of the same job id
// meets (a replay or a conflict, never a second credit).
export const PRUNE_JOBS = sql(
  'retention_prune_jobs',
  `WITH lock AS (${LOCKED}),
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
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM gone) AS rows, (SELECT count(*)::int FROM leases) AS leases`,
);

// Canary references (canaries, migrations/0020_canaries.sql): each holds a job's request and
// answer, so it goes by the same bound as finished jobs (past the window, and never before the
// ledger closed its day), measured from when it was kept — no later than its job, which a canary
// needs (verify/canaries.ts sends none whose job is gone).
export const PRUNE_CANARIES = sql(
  'retention_prune_canaries',
  `WITH lock AS (${LOCKED}),
bound AS (${BOUND}),
chosen AS (
  SELECT c.job_id FROM canaries c
  WHERE (SELECT got FROM lock) AND c.at < (SELECT before FROM bound)
  ORDER BY c.at LIMIT $3::int FOR UPDATE SKIP LOCKED
),
gone AS (DELETE FROM canaries c USING chosen x WHERE c.job_id = x.job_id RETURNING 1)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM gone) AS rows`,
);

// Counters and sessions (no payload, but rows that would grow without end): each statement
// deletes only rows older than STALE — the retention window, and never less than 8 days, longer
// than any job lives (MAX_JOB_TIMEOUT is at most 7 days, then the sweeper ends it) — and only
// rows that nothing reads or writes again:
const STALE = `SELECT coalesce($1::timestamptz, now()) - make_interval(secs => greatest($2::float8, ${8 * 86400})) AS before`;

// Usage counters (key_usage) of UTC days before STALE: GET /usage and the submit statement read
// today's only; settling a job writes its own usage_day (carried by its row of usage_owed), so
// no day that an open job counts on is touched (its jobs are queued or leased; the sweeper ends
// them within MAX_JOB_TIMEOUT).
export const PRUNE_USAGE = sql(
  'retention_prune_usage',
  `WITH lock AS (${LOCKED}),
stale AS (${STALE}),
open_days AS (SELECT min(j.usage_day) AS first FROM jobs j WHERE j.state IN ('queued', 'leased')),
chosen AS (
  SELECT u.key_id, u.day, u.model_id FROM key_usage u
  WHERE (SELECT got FROM lock) AND u.day < ((SELECT before FROM stale) AT TIME ZONE 'UTC')::date
    AND u.day < coalesce((SELECT first FROM open_days), 'infinity'::date)
  ORDER BY u.day LIMIT $3::int FOR UPDATE SKIP LOCKED
),
gone AS (DELETE FROM key_usage u USING chosen c WHERE (u.key_id, u.day, u.model_id) = (c.key_id, c.day, c.model_id) RETURNING 1)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM gone) AS rows`,
);

// Fair-queue lanes (fair_lanes, migrations/0011_fair_shares.sql) whose last key is before STALE
// and at least one step (1/priority) behind their model's virtual time (its smallest queued
// fair_key; the clock when none is queued): the submit statement gives such a lane's next job
// the same key as a lane that does not exist, so deleting it changes no job's place. (A lane
// with a job still queued is never behind: its last key is at least that job's.) The submit
// statement upserts the lane under its row lock: a lane it holds is skipped; one deleted here
// first is created afresh, as it would have been treated.
export const PRUNE_LANES = sql(
  'retention_prune_lanes',
  `WITH lock AS (${LOCKED}),
stale AS (${STALE}),
chosen AS (
  SELECT f.owner_key_id, f.model_id FROM fair_lanes f LEFT JOIN api_keys k ON k.id = f.owner_key_id
  WHERE (SELECT got FROM lock) AND f.last_key < extract(epoch FROM (SELECT before FROM stale))::float8
    AND f.last_key + 1.0 / coalesce(k.priority, 1)::float8 <= coalesce(
      (SELECT min(j.fair_key) FROM jobs j WHERE j.state = 'queued' AND j.verify_of IS NULL AND j.model_id = f.model_id),
      extract(epoch FROM clock_timestamp())::float8)
  ORDER BY f.last_key LIMIT $3::int FOR UPDATE OF f SKIP LOCKED
),
gone AS (DELETE FROM fair_lanes f USING chosen c WHERE (f.owner_key_id, f.model_id) = (c.owner_key_id, c.model_id) RETURNING 1)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM gone) AS rows`,
);

// Worker sessions not seen since before STALE, ended (deregistered) or not (the worker crashed or
// was switched off): none is live (a live session is seen within NODE_ONLINE_WINDOW) and none
// holds a lease (an open lease expires within LEASE_TIMEOUT). Each node keeps its last-seen
// session, whose time `ins node list` and the node view show as "last seen".
export const PRUNE_SESSIONS = sql(
  'retention_prune_sessions',
  `WITH lock AS (${LOCKED}),
stale AS (${STALE}),
chosen AS (
  SELECT s.id FROM node_sessions s
  WHERE (SELECT got FROM lock) AND s.last_seen_at < (SELECT before FROM stale)
    AND EXISTS (SELECT 1 FROM node_sessions x WHERE x.node_id = s.node_id AND (x.last_seen_at, x.id) > (s.last_seen_at, s.id))
    AND NOT EXISTS (SELECT 1 FROM job_leases l WHERE l.session_id = s.id AND l.ended_at IS NULL)
  ORDER BY s.last_seen_at LIMIT $3::int FOR UPDATE SKIP LOCKED
),
gone AS (DELETE FROM node_sessions s USING chosen c WHERE s.id = c.id RETURNING 1)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM gone) AS rows`,
);

// Token-level check records (token_checks, migrations/0017_token_checks.sql) judged before
// STALE: a flag reverses the jobs whose checks built its evidence (verify/scores.ts), and those
// jobs' bodies are pruned by the window too; the per-node sums (node_token_evidence, one row per
// node and model) stay.
export const PRUNE_TOKEN_CHECKS = sql(
  'retention_prune_token_checks',
  `WITH lock AS (${LOCKED}),
stale AS (${STALE}),
chosen AS (
  SELECT c.check_id FROM token_checks c
  WHERE (SELECT got FROM lock) AND c.at < (SELECT before FROM stale)
  ORDER BY c.at LIMIT $3::int FOR UPDATE SKIP LOCKED
),
gone AS (DELETE FROM token_checks c USING chosen x WHERE c.check_id = x.check_id RETURNING 1)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM gone) AS rows`,
);

// The embedded database (PGlite) runs no autovacuum and no checkpointer: after a look that
// deleted rows, the server vacuums the tables itself, so that their space is reused rather
// than the files grown, and checkpoints, so that the write-ahead log's segments are recycled
// rather than piling up to max_wal_size (1 GB) first. PostgreSQL's own processes do both.
export const VACUUM = sql('retention_vacuum', 'VACUUM jobs, job_leases, job_results, key_usage, fair_lanes, node_sessions, token_checks, canaries');
export const CHECKPOINT = sql('retention_checkpoint', 'CHECKPOINT');
