// Transitions: disable (any state → disabled) and enable (disabled → its standing again), by
// name. $1 the name, $2 true to disable, $3 this server's id. Disabling keeps the first
// disabled_at. A disabled node's key gets 403 and its sessions end here, so that enabling it
// again does not bring their tokens back (a session is valid until its node is disabled:
// docs/coordinator.md); its leases go back to the queue (nodes/lifecycle.ts).
import { sql } from '../../db/database.js';

export const SET_ACCESS = sql(
  'nodes_set_access',
  `WITH changed AS (
  UPDATE nodes SET disabled_at = CASE WHEN $2::boolean THEN coalesce(disabled_at, now()) END
  WHERE name = $1::text RETURNING id),
ended AS (
  UPDATE node_sessions s SET ended_at = now() FROM changed c WHERE $2::boolean AND s.node_id = c.id AND s.ended_at IS NULL)
SELECT id, nodes_announce($3::text, CASE WHEN $2::boolean THEN 'disabled' ELSE 'enabled' END, id, NULL) AS announced FROM changed`,
);
