// Transition: submit (none → queued, or none → leased for a hand-off). Concurrent submissions
// share this statement (jobs/submit.ts batches them). A job of a model that has a worker
// waiting on this server, and no older queued job, is leased to that worker here and now (a
// hand-off: the dispatcher's claim()), as jobs_lease would; the others are queued.
import { sql, type Queryable } from '../../db/database.js';
import { parseItems, type Outcome } from '../outcome.js';
import type { JobRequest } from '../request.js';

// $1..$5 the jobs: ids, owner key ids, model ids, requests, timeouts in seconds; $6..$9 their
// hand-offs (NULL: none): session ids, node ids, job key hashes, ranks among this batch's
// hand-offs of the same session; $10 the lease timeout in seconds; $11 this server's id. A
// hand-off holds only if the session is live, below its capacity and its node not suspended,
// as in jobs_lease; otherwise the job is queued.
export const SUBMIT = sql('jobs_submit', `WITH q AS (
  SELECT q.*, coalesce(s.ended_at IS NULL
      AND (SELECT count(*) FROM job_leases l WHERE l.session_id = q.session_id AND l.ended_at IS NULL) + q.rank <= s.capacity
      AND NOT EXISTS (SELECT 1 FROM node_standing r WHERE r.node_id = q.node_id AND r.state = 'suspended'), false) AS direct
  FROM unnest($1::uuid[], $2::bigint[], $3::integer[], $4::jsonb[], $5::float8[], $6::bigint[], $7::bigint[], $8::text[], $9::int[])
    AS q(id, owner_key_id, model_id, request, timeout, session_id, node_id, key_hash, rank)
  LEFT JOIN node_sessions s ON s.id = q.session_id
),
submitted AS (
  INSERT INTO jobs (id, owner_key_id, model_id, state, request, deadline_at, attempts, node_id, first_leased_at, lease_expires_at)
  SELECT id, owner_key_id, model_id, CASE WHEN direct THEN 'leased' ELSE 'queued' END, request, now() + make_interval(secs => timeout),
    CASE WHEN direct THEN 1 ELSE 0 END, CASE WHEN direct THEN node_id END, CASE WHEN direct THEN now() END,
    CASE WHEN direct THEN now() + make_interval(secs => least(timeout, $10::float8)) END
  FROM q
  RETURNING id, model_id, state, lease_expires_at
),
handed AS (
  INSERT INTO job_leases (key_hash, job_id, attempt, node_id, session_id, expires_at)
  SELECT q.key_hash, s.id, 1, q.node_id, q.session_id, s.lease_expires_at FROM submitted s JOIN q ON q.id = s.id WHERE s.state = 'leased'
),
announced AS (
  SELECT jobs_announce($11::text, ARRAY(SELECT model_id FROM submitted WHERE state = 'queued'), '{}', '{}', '{}', '{}', '{}', '{}') AS items
)
SELECT s.id::text AS id, s.state = 'leased' AS handed, a.items AS announced FROM submitted s CROSS JOIN announced a`);

export interface SubmitRow {
  id: string; ownerKeyId: number; modelId: number; request: JobRequest; timeout: number;
  /** A waiting worker to hand the job to, if its session can take it. */
  handOff?: { sessionId: number; nodeId: number; keyHash: string; rank: number };
}

/** Submits the jobs; answers which were handed off, and the outcome. */
export async function submitJobs(db: Queryable, rows: readonly SubmitRow[], leaseSeconds: number, server: string): Promise<{ handed: Set<string>; outcome: Outcome }> {
  const out = await db.query<{ id: string; handed: boolean; announced: string }>(SUBMIT, [
    rows.map((r) => r.id), rows.map((r) => r.ownerKeyId), rows.map((r) => r.modelId), rows.map((r) => JSON.stringify(r.request)), rows.map((r) => r.timeout),
    rows.map((r) => r.handOff?.sessionId ?? null), rows.map((r) => r.handOff?.nodeId ?? null), rows.map((r) => r.handOff?.keyHash ?? null), rows.map((r) => r.handOff?.rank ?? null),
    leaseSeconds, server,
  ]);
  const handed = new Set(out.filter((o) => o.handed).map((o) => o.id));
  const outcome = parseItems(out[0]?.announced ?? '');
  if (handed.size > 0) outcome.local = { leased: [...handed].map(() => 0) };
  return { handed, outcome };
}
