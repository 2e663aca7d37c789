// Transition: submit (none → queued, or none → leased for a hand-off). Concurrent submissions
// share this statement (jobs/submit.ts batches them). Each owner's daily quota is counted here,
// in the statement that accepts the jobs: one conditional upsert of the owner's counter for the
// UTC day (key_usage, model 0), whose row lock makes concurrent statements (on any server) take
// turns, so that the jobs accepted never exceed the quota. A job beyond it is refused (not
// inserted). Each accepted job gets its place in its model's fair queue (fair_key, start-time
// fair queueing: migrations/0011_fair_shares.sql). A job of a model that has a worker waiting on
// this server, and no older queued job, is leased to that worker here and now (a hand-off: the
// dispatcher's claim()), as jobs_lease would; the others are queued.
import { sql, type Queryable } from '../../db/database.js';
import { nodeSuspended } from '../../db/rules/suspended.js';
import { servingSession, sessionHolds } from '../../db/rules/live.js';
import { BYTES_PER_TOKEN } from '../context.js';
import { parseItems, type Outcome } from '../outcome.js';
import type { JobRequest } from '../request.js';

// $1..$5 the jobs: ids, owner key ids, model ids, requests, timeouts in seconds; $6..$9 their
// hand-offs (NULL: none): session ids, node ids, job key hashes, ranks among this batch's
// hand-offs of the same session; $10 the lease timeout in seconds; $11 this server's id; $12
// the output tokens each job reserves; $13, $14 the default daily quotas of jobs and tokens
// (NULL: none) for keys without their own; $15 whether each job asked for checked delivery
// (`x-ins-delivery: checked`: held like every job of a key set to checked, jobs/states.ts
// DELIVERY_STATES). A hand-off holds only if the session still holds (not
// ended, its node enabled and with the same key: db/rules/live.ts), is below its capacity and its
// node not suspended, as in jobs_lease; otherwise the job is queued.
//
// Quota: an owner's jobs in this batch, in order, fit while its count and its tokens (reserved
// and used) stay within the quota: a prefix of them. The upsert computes that prefix from the
// row it locked (the latest, whatever other statements committed meanwhile) and keeps the total
// it had before (prev_*), so the statement knows which of its jobs fit. A job refused for tokens
// that would fit alone in what is left ('retry') was only behind a larger one of the batch:
// jobs/submit.ts submits it again, so that a job is refused only when it does not fit (as one
// after the other would be). 'jobs' only when the count is used up after the batch. A job that
// reserves more than the whole token quota is 'reserve': it never fits, on any day.
//
// Fair queueing: a job's fair_key is its owner's last key for the model plus 1/priority, but at
// least the model's virtual time (its smallest queued fair_key; the wall clock when none is
// queued), and never more than one step past the owner's last queued job of the model (or past
// the virtual time when none is queued). n jobs of one owner and model in a batch take n
// consecutive keys.
export const SUBMIT = sql(
  'jobs_submit',
  `WITH input AS (
  SELECT q.*, row_number() OVER (PARTITION BY q.owner_key_id ORDER BY q.ord) AS r,
    sum(q.reserve) OVER (PARTITION BY q.owner_key_id ORDER BY q.ord) AS cum
  FROM unnest($1::uuid[], $2::bigint[], $3::integer[], $4::jsonb[], $5::float8[], $6::bigint[], $7::bigint[], $8::text[], $9::int[], $12::bigint[], $15::boolean[])
    WITH ORDINALITY AS q(id, owner_key_id, model_id, request, timeout, session_id, node_id, key_hash, rank, reserve, checked, ord)
),
limits AS (
  SELECT o.key_id, coalesce(k.quota_jobs, $13::bigint) AS qj, coalesce(k.quota_tokens, $14::bigint) AS qt, 1.0 / coalesce(k.priority, 1)::float8 AS step,
    coalesce(k.delivery = 'checked', false) AS key_checked,
    (now() AT TIME ZONE 'UTC')::date AS day
  FROM (SELECT DISTINCT owner_key_id AS key_id FROM input) o LEFT JOIN api_keys k ON k.id = o.key_id
),
counted AS (
  INSERT INTO key_usage AS u (key_id, day, model_id, jobs, tokens, prev_jobs, prev_tokens)
  SELECT l.key_id, l.day, 0, count(i.id), coalesce(max(i.cum), 0), 0, 0
  FROM limits l LEFT JOIN input i ON i.owner_key_id = l.key_id AND (l.qj IS NULL OR i.r <= l.qj) AND (l.qt IS NULL OR i.cum <= l.qt)
  GROUP BY l.key_id, l.day ORDER BY l.key_id
  ON CONFLICT (key_id, day, model_id) DO UPDATE SET prev_jobs = u.jobs, prev_tokens = u.tokens,
    jobs = u.jobs + (SELECT count(*) FROM input i JOIN limits l ON l.key_id = i.owner_key_id
      WHERE i.owner_key_id = u.key_id AND (l.qj IS NULL OR u.jobs + i.r <= l.qj) AND (l.qt IS NULL OR u.tokens + i.cum <= l.qt)),
    tokens = u.tokens + coalesce((SELECT max(i.cum) FROM input i JOIN limits l ON l.key_id = i.owner_key_id
      WHERE i.owner_key_id = u.key_id AND (l.qj IS NULL OR u.jobs + i.r <= l.qj) AND (l.qt IS NULL OR u.tokens + i.cum <= l.qt)), 0)
  RETURNING u.key_id, u.day, u.jobs - u.prev_jobs AS fit, u.prev_jobs, u.prev_tokens, u.tokens
),
accepted AS (
  SELECT i.*, c.day, l.step, l.key_checked, row_number() OVER (PARTITION BY i.owner_key_id, i.model_id ORDER BY i.ord) AS lane_r,
    count(*) OVER (PARTITION BY i.owner_key_id, i.model_id) AS lane_n
  FROM input i JOIN counted c ON c.key_id = i.owner_key_id JOIN limits l ON l.key_id = i.owner_key_id WHERE i.r <= c.fit
),
per_model AS (
  INSERT INTO key_usage AS u (key_id, day, model_id, jobs, tokens)
  SELECT owner_key_id, day, model_id, count(*), sum(reserve) FROM accepted GROUP BY owner_key_id, day, model_id ORDER BY 1, 3
  ON CONFLICT (key_id, day, model_id) DO UPDATE SET jobs = u.jobs + EXCLUDED.jobs, tokens = u.tokens + EXCLUDED.tokens
),
lanes_vt AS (
  SELECT a.owner_key_id, a.model_id, max(a.lane_n) AS n, max(a.step) AS step,
    coalesce((SELECT min(j.fair_key) FROM jobs j WHERE j.state = 'queued' AND j.verify_of IS NULL AND j.model_id = a.model_id),
      extract(epoch FROM clock_timestamp())::float8) AS vt,
    (SELECT max(j.fair_key) FROM jobs j WHERE j.state = 'queued' AND j.verify_of IS NULL AND j.model_id = a.model_id AND j.owner_key_id = a.owner_key_id) AS queued_top
  FROM accepted a GROUP BY a.owner_key_id, a.model_id
),
-- A lane continues after its last queued job; with none queued, after its last key but no later
-- than one step past V. (A job it had served was at the head when leased, so its key is at most
-- V: that case is plain start-time fair queueing. Only jobs that left the queue unserved —
-- canceled, expired — can leave a last key beyond V, and those must not push its next job
-- behind everyone else's.)
lanes_in AS (
  SELECT l.*, coalesce(l.queued_top, l.vt) AS cap FROM lanes_vt l
),
lanes AS (
  INSERT INTO fair_lanes AS f (owner_key_id, model_id, last_key)
  SELECT owner_key_id, model_id, vt + (n - 1) * step FROM lanes_in ORDER BY owner_key_id, model_id
  ON CONFLICT (owner_key_id, model_id) DO UPDATE SET last_key = greatest(EXCLUDED.last_key,
    (SELECT least(f.last_key, l.cap) + l.n * l.step FROM lanes_in l WHERE l.owner_key_id = f.owner_key_id AND l.model_id = f.model_id))
  RETURNING f.owner_key_id, f.model_id, f.last_key
),
q AS (
  SELECT a.*, f.last_key - (a.lane_n - a.lane_r) * a.step AS fair_key, coalesce(${sessionHolds('s', 'n')}
      AND (SELECT count(*) FROM job_leases l WHERE l.session_id = a.session_id AND l.ended_at IS NULL) + a.rank <= s.capacity
      AND NOT ${nodeSuspended('a.node_id')}, false) AS direct
  FROM accepted a JOIN lanes f ON f.owner_key_id = a.owner_key_id AND f.model_id = a.model_id
  LEFT JOIN node_sessions s ON s.id = a.session_id LEFT JOIN nodes n ON n.id = s.node_id
),
submitted AS (
  INSERT INTO jobs (id, owner_key_id, model_id, state, request, deadline_at, attempts, node_id, first_leased_at, lease_expires_at, usage_day, reserved_tokens, fair_key, delivery)
  SELECT id, owner_key_id, model_id, CASE WHEN direct THEN 'leased' ELSE 'queued' END, request, now() + make_interval(secs => timeout),
    CASE WHEN direct THEN 1 ELSE 0 END, CASE WHEN direct THEN node_id END, CASE WHEN direct THEN now() END,
    CASE WHEN direct THEN now() + make_interval(secs => least(timeout, $10::float8)) END, day, reserve, fair_key,
    CASE WHEN checked OR key_checked THEN 'held' END
  FROM q
  RETURNING id, model_id, state, lease_expires_at, delivery
),
handed AS (
  INSERT INTO job_leases (key_hash, job_id, attempt, node_id, session_id, expires_at)
  SELECT q.key_hash, s.id, 1, q.node_id, q.session_id, s.lease_expires_at FROM submitted s JOIN q ON q.id = s.id WHERE s.state = 'leased'
),
announced AS (
  SELECT jobs_announce($11::text, ARRAY(SELECT model_id FROM submitted WHERE state = 'queued'), '{}', '{}', '{}', '{}', '{}', '{}') AS items
)
SELECT s.id::text AS id, s.state = 'leased' AS handed, s.delivery IS NOT NULL AS held, NULL AS refused, a.items AS announced FROM submitted s CROSS JOIN announced a
UNION ALL
SELECT i.id::text, false, false, CASE WHEN l.qt IS NOT NULL AND i.reserve > l.qt THEN 'reserve' WHEN l.qj IS NOT NULL AND c.prev_jobs + c.fit >= l.qj THEN 'jobs'
    WHEN i.reserve <= l.qt - c.tokens THEN 'retry' ELSE 'tokens' END, a.items
FROM input i JOIN counted c ON c.key_id = i.owner_key_id JOIN limits l ON l.key_id = i.owner_key_id CROSS JOIN announced a WHERE i.r > c.fit`,
);

// Before a long job is submitted (jobs/submit.ts): $1 its model, $2 its request, $3 the
// capabilities it needs, $4 the online window, $5 MODELS_TTL (seconds). The nodes serving the
// model now with those capabilities (a session per row), how many of them could hold the
// request by its estimate (jobs/context.ts: bytes as stored, BYTES_PER_TOKEN a token; a session
// that declared no context could), and the longest context declared. No node at all is no
// refusal: the job waits for one, as any job does.
export const CONTEXT_ROOM = sql(
  'jobs_context_room',
  `SELECT count(*)::int AS nodes,
    count(*) FILTER (WHERE coalesce(d.ctx, 0) <= 0 OR octet_length(($2::jsonb - 'front')::text) / ${BYTES_PER_TOKEN} <= d.ctx)::int AS fit,
    coalesce(max(d.ctx), 0)::int AS longest, (octet_length(($2::jsonb - 'front')::text) / ${BYTES_PER_TOKEN})::int AS estimate
  FROM node_sessions s JOIN nodes n ON n.id = s.node_id CROSS JOIN LATERAL unnest(s.models, s.model_caps, s.model_contexts) AS d(model_id, caps, ctx)
  WHERE d.model_id = $1::int AND $3::int & ~coalesce(d.caps, 0) = 0 AND ${servingSession('s', 'n', '$4', '$5')}`,
);

export interface SubmitRow {
  id: string;
  ownerKeyId: number;
  modelId: number;
  request: JobRequest;
  timeout: number;
  /** Output tokens the job reserves of its owner's daily quota until the node reports its count. */
  reserve: number;
  /** The request asked for checked delivery (the key's setting is read by the statement). */
  checked?: boolean;
  /** A waiting worker to hand the job to, if its session can take it. */
  handOff?: { sessionId: number; nodeId: number; keyHash: string; rank: number };
}

/** The daily quotas of keys without their own (null: none). */
export interface QuotaDefaults {
  jobs: number | null;
  tokens: number | null;
}

/**
 * Why the statement did not take a job: which quota refused it ('reserve': its reservation alone
 * is more than the key's token quota), or 'retry': it was only behind a larger job of its batch,
 * and is to be submitted again (jobs/submit.ts).
 */
export type Refusal = 'jobs' | 'tokens' | 'reserve' | 'retry';

/** Submits the jobs; answers which were handed off, which were not taken (over their owner's quota, or to submit again), and the outcome. */
export async function submitJobs(
  db: Queryable,
  rows: readonly SubmitRow[],
  leaseSeconds: number,
  server: string,
  quota: QuotaDefaults = { jobs: null, tokens: null },
): Promise<{ handed: Set<string>; held: Set<string>; refused: Map<string, Refusal>; outcome: Outcome }> {
  const out = await db.query<{ id: string; handed: boolean; held: boolean; refused: Refusal | null; announced: string }>(SUBMIT, [
    rows.map((r) => r.id),
    rows.map((r) => r.ownerKeyId),
    rows.map((r) => r.modelId),
    rows.map((r) => JSON.stringify(r.request)),
    rows.map((r) => r.timeout),
    rows.map((r) => r.handOff?.sessionId ?? null),
    rows.map((r) => r.handOff?.nodeId ?? null),
    rows.map((r) => r.handOff?.keyHash ?? null),
    rows.map((r) => r.handOff?.rank ?? null),
    leaseSeconds,
    server,
    rows.map((r) => r.reserve),
    quota.jobs,
    quota.tokens,
    rows.map((r) => r.checked === true),
  ]);
  const held = new Set(out.filter((o) => o.held).map((o) => o.id));
  const handed = new Set(out.filter((o) => o.handed).map((o) => o.id));
  const refused = new Map(out.filter((o) => o.refused).map((o) => [o.id, o.refused!]));
  const outcome = parseItems(out[0]?.announced ?? '');
  if (handed.size > 0) outcome.local = { leased: [...handed].map(() => 0) };
  return { handed, held, refused, outcome };
}
