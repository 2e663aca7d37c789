// The network as the dashboard shows it: online nodes, queued jobs and jobs done in the last
// minute per model (its queue and throughput, and the quantisations serving it), jobs per minute, recent completions — and a node's own status and last jobs for its operator. Never a
// prompt or an answer.
import { sql, type Queryable } from '../db/database.js';
import { liveSession, modelsDeclared, servingSession, sessionHolds } from '../db/rules/live.js';

export interface NetworkView {
  active_nodes: number;
  jobs_per_minute: number;
  queued: number;
  /** Per model, also the quantisations its online nodes declared (issue 31), with how many nodes each. */
  models: { name: string; nodes?: number; queued: number; jobs_per_minute: number; quantizations: { quantization: string; nodes?: number }[] }[];
  recent: { model: string; node: string | null; finished_at: string; seconds: number }[];
}

/**
 * The view as a caller without a user or reader key sees it (issue 53): no per-model node
 * counts, nor which node did each recent job — from them a node would learn that it serves a
 * model alone, when every check it gets is a canary (docs/verification.md).
 */
export function strangersView(v: NetworkView): NetworkView {
  return {
    ...v,
    models: v.models.map(({ nodes: _nodes, ...m }) => ({ ...m, quantizations: m.quantizations.map((q) => ({ quantization: q.quantization })) })),
    recent: v.recent.map((r) => ({ ...r, node: null })),
  };
}

export interface NodeView {
  name: string;
  online: boolean;
  last_seen_at: string | null;
  models: string[];
  /** What it declared it runs, per model it serves now (issue 31: update_models' builds). */
  builds: { model: string; digest?: string; quantization?: string }[];
  open_leases: number;
  /** reversed: why the lease's points were taken back (point_reversals.reason), else null. */
  jobs: {
    model: string;
    attempt: number;
    leased_at: string;
    ended_at: string | null;
    outcome: string | null;
    seconds: number | null;
    reversed: string | null;
  }[];
}

const ISO = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`;
// A live session of an enabled node, seen within $1 seconds (db/rules/live.ts); its declaration younger than $2.
const LIVE = liveSession('s', 'n', '$1');
// Serving: live, declared within $2, its node not suspended (a suspended node serves nothing).
const SERVING = servingSession('s', 'n', '$1', '$2');

const VIEW = sql(
  'network_view',
  `WITH served AS (
    SELECT d.model_id, count(DISTINCT s.node_id)::int AS nodes
    FROM node_sessions s JOIN nodes n ON n.id = s.node_id CROSS JOIN LATERAL unnest(s.models) AS d(model_id)
    WHERE ${SERVING}
    GROUP BY d.model_id),
  quants AS (
    SELECT d.model_id, b.quantization, count(DISTINCT s.node_id)::int AS nodes
    FROM node_sessions s JOIN nodes n ON n.id = s.node_id CROSS JOIN LATERAL unnest(s.models) AS d(model_id)
      JOIN session_model_builds b ON b.session_id = s.id AND b.model_id = d.model_id AND b.quantization IS NOT NULL
    WHERE ${SERVING}
    GROUP BY d.model_id, b.quantization),
  waiting AS (SELECT model_id, count(*)::int AS queued FROM jobs WHERE state = 'queued' GROUP BY model_id)
  SELECT
    (SELECT count(DISTINCT s.node_id)::int FROM node_sessions s JOIN nodes n ON n.id = s.node_id WHERE ${LIVE}) AS active_nodes,
    (SELECT count(*)::int FROM jobs WHERE finished_at > now() - interval '1 minute' AND state = 'done') AS jobs_per_minute,
    (SELECT coalesce(sum(queued), 0)::int FROM waiting) AS queued,
    coalesce((SELECT json_agg(json_build_object('name', m.name, 'nodes', coalesce(sv.nodes, 0), 'queued', coalesce(w.queued, 0),
        'jobs_per_minute', (SELECT count(*)::int FROM jobs d WHERE d.finished_at > now() - interval '1 minute' AND d.state = 'done' AND d.model_id = m.id),
        'quantizations', coalesce((SELECT json_agg(json_build_object('quantization', q.quantization, 'nodes', q.nodes) ORDER BY q.nodes DESC, q.quantization COLLATE "C")
          FROM quants q WHERE q.model_id = m.id), '[]')) ORDER BY m.name COLLATE "C")
      FROM served sv FULL JOIN waiting w ON w.model_id = sv.model_id JOIN models m ON m.id = coalesce(sv.model_id, w.model_id)), '[]') AS models,
    coalesce((SELECT json_agg(r) FROM (
      SELECT m.name AS model, n.name AS node, ${ISO('j.finished_at')} AS finished_at,
        round(extract(epoch FROM j.finished_at - j.submitted_at)::numeric, 3)::float8 AS seconds
      FROM jobs j JOIN models m ON m.id = j.model_id LEFT JOIN nodes n ON n.id = j.node_id
      WHERE j.finished_at IS NOT NULL AND j.state = 'done' ORDER BY j.finished_at DESC LIMIT 20) r), '[]') AS recent`,
);

// A session of node n that holds its current declaration (its models, and their builds): one that
// holds (db/rules/live.ts), declared within $2 seconds.
const DECLARING = `s.node_id = n.id AND ${sessionHolds('s', 'n')} AND ${modelsDeclared('s', '$2')}`;

// $3 the node's name.
const NODE = sql(
  'network_node',
  `SELECT n.name,
    EXISTS (SELECT 1 FROM node_sessions s WHERE s.node_id = n.id AND ${liveSession('s', 'n', '$1')}) AS online,
    (SELECT ${ISO('max(s.last_seen_at)')} FROM node_sessions s WHERE s.node_id = n.id) AS last_seen_at,
    ARRAY(SELECT DISTINCT m.name FROM node_sessions s CROSS JOIN LATERAL unnest(s.models) AS d(model_id) JOIN models m ON m.id = d.model_id
      WHERE ${DECLARING} ORDER BY m.name) AS models,
    coalesce((SELECT json_agg(json_strip_nulls(json_build_object('model', r.model, 'digest', r.digest, 'quantization', r.quantization))
        ORDER BY r.model COLLATE "C", r.digest COLLATE "C", r.quantization COLLATE "C") FROM (
      SELECT DISTINCT m.name AS model, b.digest, b.quantization FROM node_sessions s
        JOIN session_model_builds b ON b.session_id = s.id AND b.model_id = ANY(s.models) JOIN models m ON m.id = b.model_id
      WHERE ${DECLARING}) r), '[]') AS builds,
    (SELECT count(*)::int FROM job_leases l WHERE l.node_id = n.id AND l.ended_at IS NULL) AS open_leases,
    coalesce((SELECT json_agg(r) FROM (
      SELECT m.name AS model, l.attempt, ${ISO('l.leased_at')} AS leased_at, ${ISO('l.ended_at')} AS ended_at, l.outcome,
        round(extract(epoch FROM l.ended_at - l.leased_at)::numeric, 3)::float8 AS seconds,
        (SELECT pr.reason FROM point_reversals pr WHERE pr.job_id = l.job_id::text AND pr.node_id = l.node_id AND l.outcome = 'done') AS reversed
      FROM job_leases l JOIN jobs j ON j.id = l.job_id JOIN models m ON m.id = j.model_id
      WHERE l.node_id = n.id ORDER BY l.leased_at DESC LIMIT 20) r), '[]') AS jobs
  FROM nodes n WHERE n.name = $3::text`,
);

export async function networkView(db: Queryable, onlineSeconds: number, modelsTtlSeconds: number): Promise<NetworkView> {
  const [row] = await db.query<NetworkView>(VIEW, [onlineSeconds, modelsTtlSeconds]);
  return row!;
}

/** The node's status and last jobs; undefined when no node has that name. */
export async function nodeView(db: Queryable, name: string, onlineSeconds: number, modelsTtlSeconds: number): Promise<NodeView | undefined> {
  const [row] = await db.query<NodeView>(NODE, [onlineSeconds, modelsTtlSeconds, name]);
  return row;
}
