// Copies of a done job for other nodes: a share of the temperature-0 jobs, every job of a node
// on probation, every probe, every answer that looked replayed — and a third copy when two
// answers disagree. A copy is a job like any other on the wire (its request is the original's,
// seed included), owned by nobody, dispatched first and never to a node that ran the job.
import { sql, type Queryable } from '../db/database.js';
import { JOBS_CHANNEL, modelCounts } from '../jobs/channels.js';

export interface CopyPlan { of: string; modelId: number; exclude: number[]; suspicion: Record<string, unknown> | null }

// Online nodes in good standing serving each of the models $1 (NULL: every model) ($2 the
// online window, $3 MODELS_TTL, in seconds): who may run a copy, and which models a probe can
// check (verify/probes.ts).
const ELIGIBLE = sql('verify_eligible_nodes', `SELECT d.model_id, array_agg(DISTINCT s.node_id)::int[] AS nodes
  FROM node_sessions s JOIN nodes n ON n.id = s.node_id CROSS JOIN LATERAL unnest(s.models) AS d(model_id)
  WHERE ($1::int[] IS NULL OR d.model_id = ANY($1::int[])) AND s.ended_at IS NULL AND n.disabled_at IS NULL AND n.key_hash = s.node_key_hash
    AND s.last_seen_at > now() - make_interval(secs => $2::float8) AND s.models_declared_at > now() - make_interval(secs => $3::float8)
    AND NOT EXISTS (SELECT 1 FROM node_standing r WHERE r.node_id = s.node_id AND r.state = 'suspended')
  GROUP BY d.model_id`);

// $1..$4 the copies: new ids, the jobs they copy, excluded nodes (array literals), suspicions;
// $5 their deadline in seconds; $6 this server's id. Tells every server (jobs/channels.ts).
const COPY = sql('verify_copy', `WITH copied AS (
    INSERT INTO jobs (id, owner_key_id, model_id, state, request, deadline_at, kind, verify_of, exclude_nodes, suspicion)
    SELECT q.id, NULL, j.model_id, 'queued', j.request, now() + make_interval(secs => $5::float8), 'verify', j.id, q.exclude::bigint[], q.suspicion
    FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::jsonb[]) AS q(id, of, exclude, suspicion) JOIN jobs j ON j.id = q.of
    RETURNING model_id),
  queued AS (SELECT string_agg(model_id || ':' || n || ':c', ',') AS items FROM (SELECT model_id, count(*) AS n FROM copied GROUP BY model_id) c)
  SELECT coalesce(items, '') AS items, (SELECT count(*)::int FROM (SELECT pg_notify('${JOBS_CHANNEL}', $6::text || ' ' || items) FROM queued WHERE items IS NOT NULL) t) AS told
  FROM queued`);

/** The nodes that may run jobs of each model (all models when `modelIds` is null). */
export async function eligibleNodes(db: Queryable, modelIds: number[] | null, onlineWindow: number, modelsTtl: number): Promise<Map<number, number[]>> {
  const rows = await db.query<{ model_id: number; nodes: number[] }>(ELIGIBLE, [modelIds, onlineWindow, modelsTtl]);
  return new Map(rows.map((r) => [r.model_id, r.nodes]));
}

export interface CopyOptions { onlineWindow: number; modelsTtl: number; deadline: number; server: string; newId: () => string }

/** The plans some node outside their exclusions can run, queued; answers the jobs queued per model. */
export async function queueCopies(db: Queryable, plans: CopyPlan[], opts: CopyOptions): Promise<{ queued: Map<number, number>; made: CopyPlan[] }> {
  if (plans.length === 0) return { queued: new Map(), made: [] };
  const eligible = await eligibleNodes(db, [...new Set(plans.map((p) => p.modelId))], opts.onlineWindow, opts.modelsTtl);
  const made = plans.filter((p) => (eligible.get(p.modelId) ?? []).some((n) => !p.exclude.includes(n)));
  if (made.length === 0) return { queued: new Map(), made };
  const [row] = await db.query<{ items: string }>(COPY, [
    made.map(() => opts.newId()), made.map((p) => p.of), made.map((p) => `{${p.exclude.join(',')}}`), made.map((p) => (p.suspicion ? JSON.stringify(p.suspicion) : null)),
    opts.deadline, opts.server,
  ]);
  return { queued: modelCounts((row?.items ?? '').split(',').filter(Boolean)), made };
}
