// Transition: revoke a reader or user key (api_keys; a node's own key is rotated instead,
// sql/rotate.ts). $1 the key's id, $2 this server's id. Announced in the statement, as every
// transition is, as `keys` (no node): every server's key cache forgets what it holds. Revoking
// a revoked key keeps its first revoked_at and announces nothing.
import { sql } from '../../db/database.js';

export const REVOKE_KEY = sql(
  'api_keys_revoke',
  `WITH revoked AS (
  UPDATE api_keys SET revoked_at = now() WHERE id = $1::bigint AND revoked_at IS NULL RETURNING id),
known AS (SELECT id FROM api_keys WHERE id = $1::bigint)
SELECT k.id, (SELECT nodes_announce($2::text, 'keys', NULL, NULL) FROM revoked) AS announced FROM known k`,
);
