// A node's secret checks (node_secret_checks, migrations/0008 and 0025): check_node_secret
// proves the node's key from an address, and lets that address register the node once per
// check without sending the key (routes/worker/register-node.ts). The node's own state, so its
// statements live with the node lifecycle's; nothing caches them, so they announce nothing.
// Run by nodes/secret-checks.ts (in the registration's transaction for a use).
import { sql } from '../../db/database.js';

// A check proves the key whose hash it records ($3), at one address, for one more registration
// (migrations/0025): checks of the same key within the window ($4 seconds) add up, to 16.
export const RECORD_CHECK = sql(
  'sessions_record_secret_check',
  `INSERT INTO node_secret_checks AS c (node_id, client_addr, checked_at, key_hash, uses)
  VALUES ($1::bigint, $2::text, now(), $3::text, 1)
  ON CONFLICT (node_id, client_addr) DO UPDATE SET checked_at = EXCLUDED.checked_at, key_hash = EXCLUDED.key_hash,
    uses = CASE WHEN c.key_hash = EXCLUDED.key_hash AND c.checked_at > now() - make_interval(secs => $4::int) THEN least(c.uses + 1, 16) ELSE 1 END`,
);
// Uses one registration of the node's check from this address ($1, $2) made within $3 seconds,
// if it proved the node's key of now; returns that key's hash. One UPDATE, its condition checked
// again on the row as a concurrent use left it: of two uses of the last registration, one wins.
export const USE_CHECK = sql(
  'sessions_use_secret_check',
  `UPDATE node_secret_checks c SET uses = c.uses - 1 FROM nodes n
  WHERE c.node_id = $1::bigint AND c.client_addr = $2::text AND c.checked_at > now() - make_interval(secs => $3::int) AND c.uses > 0
    AND n.id = c.node_id AND n.key_hash = c.key_hash
  RETURNING c.key_hash, c.uses, c.checked_at`,
);
// A spent check goes, in the transaction that spent it (its row is this transaction's already).
export const DROP_SPENT = sql(
  'sessions_drop_spent_check',
  `DELETE FROM node_secret_checks WHERE node_id = $1::bigint AND client_addr = $2::text AND uses = 0`,
);
// A registration whose answer never reached its worker gives its use back ($3 the check's time,
// $4 the key it proved), so the worker's retry is served: the row again if it was spent (with the
// spent check's time: its window, not a new one), else one more use on the row there now, in that
// row's window, while it proves the same key.
export const GIVE_BACK = sql(
  'sessions_give_back_secret_check',
  `INSERT INTO node_secret_checks AS c (node_id, client_addr, checked_at, key_hash, uses)
  VALUES ($1::bigint, $2::text, $3::timestamptz, $4::text, 1)
  ON CONFLICT (node_id, client_addr) DO UPDATE SET uses = least(c.uses + 1, 16) WHERE c.key_hash = EXCLUDED.key_hash`,
);
