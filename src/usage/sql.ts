// The settler's statement (src/usage/settle.ts; migrations/0024_usage_owed.sql). One whole
// statement, run alone (its own short transaction, under PgBouncer's transaction mode too), on
// at most $1 rows of usage_owed — what finished jobs owe their owners' usage, left there by the
// statement that finished them (the trigger usage_owed_updated, one row per owner, day and model
// of that statement):
// - it takes the transaction-scoped advisory lock USAGE_LOCK first, with try, as retention does
//   (src/retention/sql.ts): one server settles at a time; another's statement does nothing;
// - it deletes the rows it folds in the same commit as it folds them, so each is folded once:
//   into its owner's usage of the row's day, the total (model 0) and the model's row (a done
//   job's reserved tokens became its charged output tokens, a failed, expired or canceled job's
//   are given back: the trigger computed the difference from the reservation);
// - it never waits on a row another statement holds (SKIP LOCKED): that one is settled next time.
import { sql } from '../db/database.js';

/** The advisory lock of the settler (any constant the service uses for nothing else). */
export const USAGE_LOCK = 0x05e7_71e5;

export const SETTLE = sql(
  'usage_settle',
  `WITH lock AS (SELECT pg_try_advisory_xact_lock(${USAGE_LOCK}) AS got),
taken AS (
  DELETE FROM usage_owed WHERE ctid = ANY(ARRAY(SELECT ctid FROM usage_owed WHERE (SELECT got FROM lock) LIMIT $1::int FOR UPDATE SKIP LOCKED))
  RETURNING key_id, day, model_id, tokens, jobs
),
folded AS (
  INSERT INTO key_usage AS u (key_id, day, model_id, tokens)
  SELECT t.key_id, t.day, m.model_id, sum(t.tokens) FROM taken t CROSS JOIN LATERAL (VALUES (0), (t.model_id)) AS m(model_id)
  GROUP BY 1, 2, 3 HAVING sum(t.tokens) <> 0 ORDER BY 1, 2, 3
  ON CONFLICT (key_id, day, model_id) DO UPDATE SET tokens = u.tokens + EXCLUDED.tokens
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*)::int FROM taken) AS rows, (SELECT coalesce(sum(jobs), 0)::int FROM taken) AS jobs`,
);

// The settler vacuums the rows it deleted itself, at most once a minute (settle.ts): PGlite has
// no autovacuum (src/retention/sql.ts VACUUM), and a PostgreSQL may have it off. One statement
// outside any transaction, as VACUUM must be (through PgBouncer's transaction mode too).
export const VACUUM_OWED = sql('usage_vacuum', 'VACUUM usage_owed');
