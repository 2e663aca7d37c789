// Transition: rotate key (the state stays). $1 the name, $2 the new key's hash, $3 this
// server's id. Sessions begun with the old key are void from this commit (node_sessions.
// node_key_hash no longer matches), and so are the old key's secret checks.
import { sql } from '../../db/database.js';

export const ROTATE = sql(
  'nodes_rotate',
  `WITH rotated AS (
  UPDATE nodes SET key_hash = $2::text WHERE name = $1::text RETURNING id)
SELECT id, nodes_announce($3::text, 'rotated', id, NULL) AS announced FROM rotated`,
);
