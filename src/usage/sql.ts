// The settler's statement (src/usage/settle.ts; migrations/0014_usage_settled.sql). One whole
// statement, run alone (its own short transaction, under PgBouncer's transaction mode too), on
// a batch of at most $1 finished jobs whose usage is owed (usage_day set, index jobs_unsettled):
// - it takes the transaction-scoped advisory lock USAGE_LOCK first, with try, as retention does
//   (src/retention/sql.ts): one server settles at a time; another's statement does nothing;
// - it reads each job's final state and usage as the statement that finished it left them
//   (jobs.usage: sql/complete.ts decides what a done job cost; this statement never recomputes
//   it) and folds the difference from the reservation into its owner's usage of the job's
//   usage_day, the total (model 0) and the model's row: a done job's reserved tokens become its
//   reported output tokens (kept reserved when it reported none), a failed, expired or canceled
//   job's are given back;
// - it marks the jobs settled (usage_day NULL) in the same commit, so each is folded once;
// - it never waits on a job another statement holds (SKIP LOCKED): that one is settled next time.
import { sql } from '../db/database.js';

/** The advisory lock of the settler (any constant the service uses for nothing else). */
export const USAGE_LOCK = 0x05e7_71e5;

export const SETTLE = sql('usage_settle', `WITH lock AS (SELECT pg_try_advisory_xact_lock(${USAGE_LOCK}) AS got),
chosen AS (
  SELECT j.id, j.owner_key_id, j.usage_day, j.model_id, j.state, j.usage, j.reserved_tokens FROM jobs j
  WHERE (SELECT got FROM lock) AND j.usage_day IS NOT NULL AND j.finished_at IS NOT NULL
  ORDER BY j.finished_at LIMIT $1::int FOR UPDATE SKIP LOCKED
),
settled AS (
  UPDATE jobs j SET usage_day = NULL FROM chosen c WHERE j.id = c.id RETURNING 1
),
deltas AS (
  SELECT owner_key_id, usage_day, model_id, CASE WHEN state = 'done'
      THEN coalesce((usage ->> 'completion_tokens')::bigint, reserved_tokens) - reserved_tokens ELSE -reserved_tokens END AS delta
  FROM chosen WHERE owner_key_id IS NOT NULL
),
folded AS (
  INSERT INTO key_usage AS u (key_id, day, model_id, tokens)
  SELECT d.owner_key_id, d.usage_day, m.model_id, sum(d.delta) FROM deltas d CROSS JOIN LATERAL (VALUES (0), (d.model_id)) AS m(model_id)
  WHERE d.delta <> 0 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  ON CONFLICT (key_id, day, model_id) DO UPDATE SET tokens = u.tokens + EXCLUDED.tokens
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM settled) AS rows`);
