// Models as workers name them, with an optional points_per_job (NULL: the configured default).
import { sql, type Queryable } from '../db/database.js';
import { servingSession } from '../db/rules/live.js';

export interface ModelListing {
  name: string;
  points_per_job: number | null;
  nodes: number;
}

const FIND = sql('models_find', 'SELECT id FROM models WHERE name = $1::text');
const INSERT = sql('models_insert', 'INSERT INTO models (name) VALUES ($1::text) ON CONFLICT (name) DO NOTHING');
// Models `creator` (created_by_key or created_by_node) = $2 made this UTC day.
const madeToday = (creator: string): string => `(SELECT count(*) FROM models WHERE ${creator} = $2::bigint
    AND created_at >= ((now() AT TIME ZONE 'UTC')::date)::timestamp AT TIME ZONE 'UTC')`;
// $1 the name, $2 the user key (created_by_key) or node (created_by_node) naming it, $3 how
// many new names it may create per UTC day: created only while it created fewer today (a race
// of concurrent calls may pass the count together: the bound is exceeded by at most their number).
const insertBy = (creator: 'created_by_key' | 'created_by_node') =>
  sql(
    `models_insert_by_${creator.slice(11)}`,
    `INSERT INTO models (name, ${creator}, created_at)
  SELECT $1::text, $2::bigint, now()
  WHERE ${madeToday(creator)} < $3::int
  ON CONFLICT (name) DO NOTHING`,
  );
const INSERT_BY = { key: insertBy('created_by_key'), node: insertBy('created_by_node') };
// $1 names a session of node $2 declares, $3 that session: how many of the names are no model
// yet, how many models the node created this UTC day, and how many models the node would serve
// with this declaration beside its other serving sessions' (seen within $4 s, declared within $5
// s: a worker restarted without deregistering leaves a session that serves nothing; the node is
// not suspended, or update_models would have refused it).
const NEW_FOR_NODE = sql(
  'models_new_for_node',
  `SELECT
    (SELECT count(*)::int FROM unnest($1::text[]) AS x(name) WHERE NOT EXISTS (SELECT 1 FROM models m WHERE m.name = x.name)) AS unknown,
    ${madeToday('created_by_node')}::int AS today,
    (SELECT count(*)::int FROM (
      SELECT m.name FROM node_sessions s CROSS JOIN LATERAL unnest(s.models) AS d(model_id) JOIN models m ON m.id = d.model_id
      JOIN nodes n ON n.id = s.node_id
      WHERE s.node_id = $2::bigint AND s.id <> $3::bigint AND ${servingSession('s', 'n', '$4', '$5')}
      UNION SELECT unnest($1::text[])) x) AS served`,
);

/** Of `names` (a declaration of session `sessionId`), how many are no model yet; the models the node created this UTC day; those it would serve with them. */
export async function newModelsForNode(
  db: Queryable,
  names: string[],
  nodeId: number,
  sessionId: number,
  windows: { onlineWindow: number; modelsTtl: number },
): Promise<{ unknown: number; today: number; served: number }> {
  const [row] = await db.query<{ unknown: number; today: number; served: number }>(NEW_FOR_NODE, [
    names,
    nodeId,
    sessionId,
    windows.onlineWindow,
    windows.modelsTtl,
  ]);
  return row!;
}
// created: the row is new (xmax is 0 only for a row this statement inserted).
const SET_POINTS = sql(
  'models_set_points',
  `INSERT INTO models (name, points_per_job) VALUES ($1::text, $2::numeric)
  ON CONFLICT (name) DO UPDATE SET points_per_job = EXCLUDED.points_per_job
  RETURNING xmax = 0 AS created`,
);
const LIST = sql(
  'models_list',
  `SELECT m.name, m.points_per_job::float8 AS points_per_job,
    (SELECT count(*)::int FROM model_nodes mn WHERE mn.model_id = m.id) AS nodes
  FROM models m ORDER BY m.name COLLATE "C"`,
);

// Model ids never change and models are never deleted, so name → id is cached per database.
const idCache = new WeakMap<Queryable, Map<string, number>>();
const CACHE_LIMIT = 10_000;

/** The model's id, creating the model on first sight. */
export async function ensureModelId(db: Queryable, name: string): Promise<number> {
  let cache = idCache.get(db);
  if (!cache) idCache.set(db, (cache = new Map<string, number>()));
  const cached = cache.get(name);
  if (cached !== undefined) return cached;
  let [row] = await db.query<{ id: number }>(FIND, [name]);
  if (!row) {
    await db.query(INSERT, [name]);
    // A new statement sees the row whether this call or a concurrent one inserted it.
    [row] = await db.query<{ id: number }>(FIND, [name]);
  }
  if (cache.size >= CACHE_LIMIT) cache.clear();
  cache.set(name, row!.id);
  return row!.id;
}

/**
 * The model's id for a user's submission (`by.key`) or a node's declaration (`by.node`): created
 * on first sight only while that key or node created fewer than `perDay` models this UTC day;
 * undefined beyond that (one key or node cannot grow the models table, and the rows and lists
 * per model, without bound).
 */
export async function ensureModelIdFor(
  db: Queryable,
  name: string,
  by: { key: number } | { node: number },
  perDay: number,
): Promise<number | undefined> {
  const cache = idCache.get(db);
  const cached = cache?.get(name);
  if (cached !== undefined) return cached;
  const [found] = await db.query<{ id: number }>(FIND, [name]);
  if (found) return ensureModelId(db, name);
  await db.query('key' in by ? INSERT_BY.key : INSERT_BY.node, [name, 'key' in by ? by.key : by.node, perDay]);
  const [row] = await db.query<{ id: number }>(FIND, [name]);
  return row ? ensureModelId(db, name) : undefined;
}

/** points null: back to the default. Answers whether the model was new (no node had declared or reported it). */
export async function setModelPoints(db: Queryable, name: string, points: number | null): Promise<{ created: boolean }> {
  const [row] = await db.query<{ created: boolean }>(SET_POINTS, [name, points]);
  return { created: row!.created };
}

export async function listModels(db: Queryable): Promise<ModelListing[]> {
  return db.query<ModelListing>(LIST);
}
