// Nodes and their keys: what authentication and the CLI read. Their changes are the node
// lifecycle's (src/nodes/lifecycle.ts).
import { sql, type Queryable } from '../db/database.js';
import { nodeSuspended } from '../db/rules/suspended.js';
import { modelsDeclared, sessionHolds } from '../db/rules/live.js';

/** suspended: its answers failed verification (src/verify/standing.ts). */
export interface NodeRow {
  id: number;
  name: string;
  disabled: boolean;
  suspended: boolean;
}
export interface NodeListing {
  name: string;
  disabled: boolean;
  created_at: string;
  last_day_with_points: string | null;
  total_points: number;
  online: boolean;
  last_seen_at: string | null;
  models: string[];
  open_leases: number;
  /** trusted, probation or suspended (src/verify/standing.ts). */
  standing: string;
}

/** SQL: whether node `n` is suspended (src/verify/standing.ts), for statements over nodes n. */
export const NODE_SUSPENDED = nodeSuspended('n.id');
const BY_KEY = sql(
  'nodes_by_key',
  `SELECT n.id, n.name, n.disabled_at IS NOT NULL AS disabled, ${NODE_SUSPENDED} AS suspended FROM nodes n WHERE n.key_hash = $1::text`,
);
const COUNT = sql('nodes_count', 'SELECT count(*)::int AS n FROM nodes');
const NAME = sql('nodes_name', 'SELECT name FROM nodes WHERE id = $1::bigint');
// $1 the online window, $2 MODELS_TTL, both in seconds. A node's live sessions: those that hold
// (db/rules/live.ts), seen within the window.
const LIST = sql(
  'nodes_list',
  `SELECT n.name, n.disabled_at IS NOT NULL AS disabled, to_char(n.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created_at,
    (SELECT max(day)::text FROM node_daily_points p WHERE p.node_id = n.id) AS last_day_with_points,
    coalesce((SELECT sum(points) FROM node_daily_points p WHERE p.node_id = n.id), 0)::float8 AS total_points,
    coalesce(s.live_seen_at > now() - make_interval(secs => $1::float8), false) AS online,
    to_char(s.last_seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS last_seen_at,
    ARRAY(SELECT DISTINCT m.name FROM node_sessions x CROSS JOIN LATERAL unnest(x.models) AS d(model_id) JOIN models m ON m.id = d.model_id
      WHERE x.node_id = n.id AND ${sessionHolds('x', 'n')} AND ${modelsDeclared('x', '$2')} AND NOT ${nodeSuspended('n.id')} ORDER BY m.name) AS models,
    (SELECT count(*)::int FROM job_leases l WHERE l.node_id = n.id AND l.ended_at IS NULL) AS open_leases,
    coalesce((SELECT r.state FROM node_standing r WHERE r.node_id = n.id), 'trusted') AS standing
  FROM nodes n
  LEFT JOIN LATERAL (SELECT max(x.last_seen_at) FILTER (WHERE ${sessionHolds('x', 'n')}) AS live_seen_at,
      max(x.last_seen_at) AS last_seen_at
    FROM node_sessions x WHERE x.node_id = n.id) s ON true
  ORDER BY n.name COLLATE "C"`,
);

export async function findNodeByKeyHash(db: Queryable, hash: string): Promise<NodeRow | undefined> {
  const [row] = await db.query<NodeRow>(BY_KEY, [hash]);
  return row ? { ...row, id: Number(row.id) } : undefined;
}

/** A node's name by its id (undefined: no such node). */
export async function nodeNameOf(db: Queryable, id: number): Promise<string | undefined> {
  const [row] = await db.query<{ name: string }>(NAME, [id]);
  return row?.name;
}

export async function countNodes(db: Queryable): Promise<number> {
  const [row] = await db.query<{ n: number }>(COUNT);
  return row!.n;
}

export async function listNodes(db: Queryable, onlineSeconds: number, modelsTtlSeconds: number): Promise<NodeListing[]> {
  return db.query<NodeListing>(LIST, [onlineSeconds, modelsTtlSeconds]);
}
