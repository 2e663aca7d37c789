// Transition: node add (none → trusted). $1 the name, $2 its key's hash, $3 this server's id.
// The key itself exists nowhere but in the caller's hands. A name taken: unique violation.
import { sql } from '../../db/database.js';

export const ADD = sql(
  'nodes_add',
  `WITH added AS (
  INSERT INTO nodes (name, key_hash) VALUES ($1::text, $2::text) RETURNING id)
SELECT id, nodes_announce($3::text, 'added', id, NULL) AS announced FROM added`,
);

// Transition: node add for every row of an import's staging table (`ins import nodes`,
// import/nodes.ts; its checks ran before: names and keys new and unique). One announcement for
// the batch, from no server (every server applies it: new nodes, nothing cached to forget but
// the counts), and only when a node was added.
export const IMPORT = sql(
  'nodes_import',
  `WITH added AS (
  INSERT INTO nodes (name, key_hash) SELECT name, key_hash FROM import_nodes ORDER BY line RETURNING id)
SELECT n, CASE WHEN n > 0 THEN nodes_announce(NULL, 'added', NULL, NULL) END AS announced
FROM (SELECT count(*)::int AS n FROM added) c`,
);
