// Every write to api_keys (reader and user keys; src/nodes/api-keys.ts runs them). Adding a key,
// and a user key's quotas and priority, are read fresh by every statement that uses them and
// cached nowhere: nothing to announce. Transition: revoke a reader or user key (a node's own key
// is rotated instead, sql/rotate.ts). $1 the key's id, $2 this server's id. Announced in the statement, as every
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

// $1 kind, $2 label, $3 the key's hash.
export const INSERT_KEY = sql('api_keys_insert', 'INSERT INTO api_keys (kind, label, key_hash) VALUES ($1::text, $2::text, $3::text) RETURNING id');

// $1 the key, then for jobs and tokens: whether to set it, and its value (NULL: the configured default).
export const SET_QUOTA = sql(
  'api_keys_set_quota',
  `UPDATE api_keys SET quota_jobs = CASE WHEN $2::boolean THEN $3::bigint ELSE quota_jobs END,
    quota_tokens = CASE WHEN $4::boolean THEN $5::bigint ELSE quota_tokens END
  WHERE id = $1::bigint AND kind = 'user' RETURNING id, quota_jobs::float8 AS jobs, quota_tokens::float8 AS tokens`,
);
export const SET_PRIORITY = sql(
  'api_keys_set_priority',
  `UPDATE api_keys SET priority = $2::real WHERE id = $1::bigint AND kind = 'user' RETURNING id`,
);
// $1 the key, $2 its delivery (immediate|checked; docs/verification.md, "Checked delivery").
export const SET_DELIVERY = sql(
  'api_keys_set_delivery',
  `UPDATE api_keys SET delivery = $2::text WHERE id = $1::bigint AND kind = 'user' RETURNING id`,
);
