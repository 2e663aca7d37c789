// Transitions of a node's worker sessions (the node's state stays): register opens one,
// deregister ends it. (declare, a session's new set of models, is sql/declare.ts.)
import { sql, type Queryable } from '../../db/database.js';

// $1 node, $2 token hash, $3 the node key's hash it began with, $4 version, $5 stats, $6
// capacity, $7 this server's id.
export const REGISTER = sql(
  'nodes_register',
  `WITH opened AS (
  INSERT INTO node_sessions (node_id, token_hash, node_key_hash, node_version, stats, capacity)
  VALUES ($1::bigint, $2::text, $3::text, $4::text, $5::jsonb, $6::int) RETURNING id, node_id)
SELECT id, nodes_announce($7::text, 'registered', node_id, id) AS announced FROM opened`,
);

// $1 session, $2 this server's id. A session ended already: no row, nothing announced.
export const DEREGISTER = sql(
  'nodes_deregister',
  `WITH ended AS (
  UPDATE node_sessions SET ended_at = now() WHERE id = $1::bigint AND ended_at IS NULL RETURNING id, node_id)
SELECT id, node_id, nodes_announce($2::text, 'deregistered', node_id, id) AS announced FROM ended`,
);

// Not a transition: when each session was last seen (jobs/presence.ts writes it every few seconds
// for the sessions that called), $1 the sessions, $2 when. A later time only; announced to nobody.
export const TOUCH = sql(
  'sessions_touch',
  `UPDATE node_sessions s SET last_seen_at = greatest(s.last_seen_at, t.at)
  FROM unnest($1::bigint[], $2::timestamptz[]) AS t(id, at) WHERE s.id = t.id`,
);

/** The sessions' last seen times (jobs/presence.ts), in one statement. */
export async function touchSessions(db: Queryable, seen: Map<number, Date>): Promise<void> {
  if (seen.size === 0) return;
  await db.query(TOUCH, [[...seen.keys()], [...seen.values()].map((d) => d.toISOString())]);
}
