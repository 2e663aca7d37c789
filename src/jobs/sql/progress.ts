// Partial output belongs to a lease (POST /worker/job_progress, jobs/progress.ts): a worker
// streaming a job sends the text as it comes; it is kept with the lease (what the client has
// been sent, so that the next node can continue the answer if this one fails) and relayed to
// whoever streams the job to its client. Not a transition: a lease that has ended takes nothing
// (the worker hears so: its lease is gone — canceled, expired, finished elsewhere).
import { sql, type Queryable } from '../../db/database.js';

// $1 the job key's hash, $2 the job id, $3 the text, $4 the most characters a lease may keep;
// $5 whether to renew the lease as well (RENEW_LEASE's rule, with $6 LEASE_TIMEOUT and $7
// HEARTBEAT_TIMEOUT in seconds): one statement for the text and the renewal, not two in turn.
// The lease row is locked, so the offset (where the text starts in the whole answer, prefix
// included, in characters) is that of the latest text. What a lease keeps is always the true
// beginning of what it generated: at the cap, the text is cut there and nothing later is kept
// (a gap would make the rest look like it followed on). Text of a job no client streams is taken
// but neither kept nor relayed.
export const KEEP_PROGRESS = sql(
  'jobs_progress_keep',
  `WITH lease AS (
  SELECT l.key_hash, l.attempt, char_length(l.prefix) + char_length(l.partial) AS at,
    CASE WHEN coalesce((j.request ->> 'stream')::boolean, false)
      THEN greatest(0, least(char_length($3::text), $4::int - char_length(l.partial))) ELSE 0 END AS kept,
    least(j.deadline_at, l.leased_at + make_interval(secs => $6::float8 + l.paused_seconds), now() + make_interval(secs => $7::float8)) AS renewed_until
  FROM job_leases l JOIN jobs j ON j.id = l.job_id
  WHERE l.key_hash = $1::text AND l.ended_at IS NULL AND l.job_id::text = $2::text
  FOR UPDATE OF l
),
stored AS (
  UPDATE job_leases l SET partial = l.partial || left($3::text, x.kept),
    expires_at = CASE WHEN $5::boolean THEN x.renewed_until ELSE l.expires_at END
  FROM lease x WHERE l.key_hash = x.key_hash AND (x.kept > 0 OR $5::boolean)
  RETURNING l.key_hash
)
SELECT x.attempt, x.at, x.kept, (SELECT count(*)::int FROM stored) AS stored FROM lease x`,
);

// $1 the job key's hash, $2 the job id: the lease is open (a heartbeat: progress without text).
export const LEASE_OPEN = sql(
  'jobs_progress_lease',
  `SELECT attempt FROM job_leases
  WHERE key_hash = $1::text AND ended_at IS NULL AND job_id::text = $2::text`,
);

// $1 the job key's hash, $2 LEASE_TIMEOUT, $3 HEARTBEAT_TIMEOUT (seconds). A worker that sends
// progress (text or heartbeats) holds its lease while it does: the lease now ends $3 seconds from
// now, and never later than it would have without heartbeats (LEASE_TIMEOUT after it began, the
// job's deadline: sql/lease.ts). A worker that dies gives its job back within $3 seconds and the
// next sweep; one that never sends any (the seed's) keeps the whole LEASE_TIMEOUT.
export const RENEW_LEASE = sql(
  'jobs_progress_renew',
  `UPDATE job_leases l
  SET expires_at = least(j.deadline_at, l.leased_at + make_interval(secs => $2::float8 + l.paused_seconds), now() + make_interval(secs => $3::float8))
  FROM jobs j WHERE l.key_hash = $1::text AND l.ended_at IS NULL AND j.id = l.job_id`,
);

/** Renews the open lease of this job key (RENEW_LEASE). */
export async function renewLease(db: Queryable, keyHash: string, leaseSeconds: number, heartbeatSeconds: number): Promise<void> {
  await db.query(RENEW_LEASE, [keyHash, leaseSeconds, heartbeatSeconds]);
}

/** What an open lease kept of the text: its attempt, the offset of the text in the answer and how many of its characters (from the start) it kept. */
export interface Kept {
  attempt: number;
  at: number;
  kept: number;
}

/** Keeps the text with its open lease, and renews the lease when `renew` gives its timeouts; undefined when that lease is not open. */
export async function keepProgress(
  db: Queryable,
  keyHash: string,
  jobId: string,
  text: string,
  cap: number,
  renew?: { lease: number; heartbeat: number },
): Promise<Kept | undefined> {
  const [row] = await db.query<Kept>(KEEP_PROGRESS, [keyHash, jobId, text, cap, renew !== undefined, renew?.lease ?? 0, renew?.heartbeat ?? 0]);
  return row;
}

/** The open lease's attempt; undefined when it is not open. */
export async function openLeaseAttempt(db: Queryable, keyHash: string, jobId: string): Promise<number | undefined> {
  const [row] = await db.query<{ attempt: number }>(LEASE_OPEN, [keyHash, jobId]);
  return row?.attempt;
}
