// Worker sessions (node_sessions): register_node opens one and hands out its token (ns_),
// which the worker sends on every later call; update_models declares the session's models;
// deregister_node ends it (opening, declaring, ending and announcing are the node lifecycle's:
// src/nodes/lifecycle.ts, src/nodes/sql/). A session is live while not ended, its node not disabled, and the
// node's key the one it began with (rotating the key voids every session of the node).
import { sql, type Queryable } from '../db/database.js';
import { NODE_SUSPENDED, type NodeRow } from './nodes.js';
import { modelsDeclared, sessionHolds } from '../db/rules/live.js';

export interface SessionRow {
  id: number;
  node: NodeRow;
  capacity: number;
  /** Declared model ids; empty when none were declared or the declaration lapsed. */
  models: number[];
  /** What the node can do with each model, aligned with `models` (jobs/capabilities.ts bits; 0: plain chat only). */
  caps?: number[];
  /** The context length (tokens) the node declared for each model, aligned with `models` (0: none declared; jobs/context.ts). */
  contexts?: number[];
  /** The worker declared capabilities (`ins worker`; the seed's worker declares none): its job_data may carry the OpenAI parameters. */
  capable?: boolean;
}

export interface SessionListing {
  node: string;
  session: number;
  node_version: string;
  capacity: number;
  models: string[];
  started_at: string;
  last_seen_at: string;
  open_leases: number;
}

const NODE_FOR_REGISTRATION = sql(
  'sessions_node_by_name',
  `SELECT n.id, n.name, n.disabled_at IS NOT NULL AS disabled, ${NODE_SUSPENDED} AS suspended, n.key_hash
  FROM nodes n WHERE n.name = $1::text`,
);

// $2: the MODELS_TTL in seconds.
// A suspended node (src/verify/) serves nothing: its session has no models.
const BY_TOKEN = sql(
  'sessions_by_token',
  `SELECT s.id, s.node_id, n.name, s.capacity, ${NODE_SUSPENDED} AS suspended,
    CASE WHEN ${modelsDeclared('s', '$2')} AND NOT ${NODE_SUSPENDED} THEN s.models ELSE '{}' END AS models,
    s.model_caps, s.model_contexts
  FROM node_sessions s JOIN nodes n ON n.id = s.node_id
  WHERE s.token_hash = $1::text AND ${sessionHolds('s', 'n')}`,
);
// Live sessions, with their node, models and open leases.
const LIST = sql(
  'sessions_list',
  `SELECT n.name AS node, s.id::int AS session, s.node_version, s.capacity,
    ARRAY(SELECT m.name FROM models m WHERE m.id = ANY(s.models) ORDER BY m.name COLLATE "C") AS models,
    to_char(s.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS started_at,
    to_char(s.last_seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS last_seen_at,
    (SELECT count(*)::int FROM job_leases l WHERE l.session_id = s.id AND l.ended_at IS NULL) AS open_leases
  FROM node_sessions s JOIN nodes n ON n.id = s.node_id
  WHERE ${sessionHolds('s', 'n')}
  ORDER BY n.name COLLATE "C", s.id`,
);

export type RegistrationNode = NodeRow & { key_hash: string };

export async function findNodeForRegistration(db: Queryable, name: string): Promise<RegistrationNode | undefined> {
  const [row] = await db.query<RegistrationNode>(NODE_FOR_REGISTRATION, [name]);
  return row ? { ...row, id: Number(row.id) } : undefined;
}

export async function findSessionByTokenHash(db: Queryable, hash: string, modelsTtlSeconds: number): Promise<SessionRow | undefined> {
  const [row] = await db.query<{
    id: number;
    node_id: number;
    name: string;
    capacity: number;
    suspended: boolean;
    models: number[];
    model_caps: number[];
    model_contexts: number[];
  }>(BY_TOKEN, [hash, modelsTtlSeconds]);
  if (!row) return undefined;
  const models = row.models.map(Number);
  const caps = models.map((_, i) => Number(row.model_caps[i] ?? 0));
  const contexts = models.map((_, i) => Number(row.model_contexts[i] ?? 0));
  return {
    id: Number(row.id),
    node: { id: Number(row.node_id), name: row.name, disabled: false, suspended: row.suspended },
    capacity: row.capacity,
    models,
    caps,
    contexts,
    capable: row.model_caps.length > 0,
  };
}

export async function listSessions(db: Queryable): Promise<SessionListing[]> {
  return db.query<SessionListing>(LIST);
}
