// Transition: cancel (queued|leased → canceled), by the job's owner or an operator. A leased
// job's lease ends as `canceled`: its node learns it at its next job_progress (refused) or
// report (refused with 400, nothing credited). A final job stays as it is.
import { sql, type Queryable } from '../../db/database.js';
import { parseItems, type Outcome } from '../outcome.js';
import type { JobState } from '../states.js';

// $1 job id, $2 the owner's key id (NULL: an operator, any owner), $3 why, $4 this server's id.
// The lease ends first (the lock order of sql/lease.ts); a leased job is canceled only if this
// statement ended its lease, so a report that ended it first wins.
export const CANCEL = sql(
  'jobs_cancel',
  `WITH job AS (
  SELECT id, state FROM jobs WHERE id = $1::uuid AND ($2::bigint IS NULL OR owner_key_id = $2::bigint)
),
lease AS (
  UPDATE job_leases l SET ended_at = now(), outcome = 'canceled'
  FROM job WHERE l.job_id = job.id AND job.state = 'leased' AND l.ended_at IS NULL
  RETURNING l.job_id
),
canceled AS (
  UPDATE jobs j SET state = 'canceled', finished_at = now(), detail = $3::text, node_id = NULL, lease_expires_at = NULL, streamed = ''
  FROM job WHERE j.id = job.id AND (j.state = 'queued' OR (j.state = 'leased' AND j.id IN (SELECT job_id FROM lease)))
  RETURNING j.id, j.model_id
),
-- The tokens the job reserved of its owner's daily quota are given back by the settler
-- (src/usage/sql.ts), not here.
announced AS (
  SELECT jobs_announce($4::text, '{}', '{}', ARRAY(SELECT id FROM canceled), ARRAY(SELECT 'canceled' FROM canceled), ARRAY(SELECT model_id FROM canceled), '{}', '{}') AS items
)
SELECT a.items AS announced, (SELECT state FROM job) AS before, EXISTS (SELECT 1 FROM canceled) AS canceled FROM announced a`,
);

/** The job's state before (undefined: no such job of this owner), whether it is now canceled, and the outcome. */
export async function cancelJob(
  db: Queryable,
  jobId: string,
  ownerKeyId: number | null,
  why: string,
  server: string,
): Promise<{ before: JobState | undefined; canceled: boolean; outcome: Outcome }> {
  const [row] = await db.query<{ announced: string; before: JobState | null; canceled: boolean }>(CANCEL, [jobId, ownerKeyId, why, server]);
  return { before: row!.before ?? undefined, canceled: row!.canceled, outcome: parseItems(row!.announced) };
}
