// Transition: node add (none → trusted). $1 the name, $2 its key's hash, $3 this server's id.
// The key itself exists nowhere but in the caller's hands. A name taken: unique violation.
import { sql } from '../../db/database.js';

export const ADD = sql('nodes_add', `WITH added AS (
  INSERT INTO nodes (name, key_hash) VALUES ($1::text, $2::text) RETURNING id)
SELECT id, nodes_announce($3::text, 'added', id, NULL) AS announced FROM added`);
