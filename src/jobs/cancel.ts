// Canceling a queued job (its owner, or an operator): a leased job is being worked on and is
// left to finish; a final one stays as it is.
import { sql, type Queryable } from '../db/database.js';
import { RESULTS_CHANNEL } from './channels.js';

// $1 job id, $2 the owner's key id (NULL: an operator, any owner), $3 why, $4 this server's id.
const CANCEL = sql('jobs_cancel', `WITH canceled AS (
  UPDATE jobs SET state = 'canceled', finished_at = now(), detail = $3::text
  WHERE id = $1::uuid AND state = 'queued' AND ($2::bigint IS NULL OR owner_key_id = $2::bigint)
  RETURNING id),
told AS (SELECT pg_notify('${RESULTS_CHANNEL}', $4::text || ' ' || id::text) FROM canceled)
SELECT (SELECT count(*)::int FROM canceled) AS canceled, (SELECT count(*)::int FROM told) AS told`);

/** True when the job was queued (and owned by ownerKeyId, if given) and is now canceled. */
export async function cancelQueuedJob(db: Queryable, jobId: string, ownerKeyId: number | null, why: string, server: string): Promise<boolean> {
  const [row] = await db.query<{ canceled: number }>(CANCEL, [jobId, ownerKeyId, why, server]);
  return row!.canceled > 0;
}
