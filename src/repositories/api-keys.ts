// API keys that belong to no node: reader keys (rk_, dashboards: read any node's daily points,
// cannot report) and user keys (uk_, applications: submit jobs, read their own results).
import { sql, type Database, type Queryable } from '../db/database.js';
import { newKey } from '../keys.js';
import { announceKeyChange } from './key-events.js';

export type ApiKeyKind = 'reader' | 'user';
export interface ApiKeyListing { id: number; kind: ApiKeyKind; label: string; revoked: boolean; created_at: string }

const INSERT = sql('api_keys_insert', 'INSERT INTO api_keys (kind, label, key_hash) VALUES ($1::text, $2::text, $3::text) RETURNING id');
const ACTIVE_BY_KEY = sql('api_keys_by_key', 'SELECT id, kind FROM api_keys WHERE key_hash = $1::text AND revoked_at IS NULL');
const LIST = sql('api_keys_list', `SELECT id, kind, label, revoked_at IS NOT NULL AS revoked,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created_at
  FROM api_keys ORDER BY id`);
const REVOKE_BY_ID = sql('api_keys_revoke_id', 'UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1::bigint RETURNING id');
const BY_LABEL = sql('api_keys_by_label', 'SELECT id FROM api_keys WHERE label = $1::text AND revoked_at IS NULL');

export async function addApiKey(db: Queryable, kind: ApiKeyKind, label: string): Promise<{ id: number; key: string }> {
  const { key, hash } = newKey(kind);
  const [row] = await db.query<{ id: number }>(INSERT, [kind, label, hash]);
  return { id: Number(row!.id), key };
}

/** The active key with this hash, or undefined. */
export async function findActiveApiKey(db: Queryable, hash: string): Promise<{ id: number; kind: ApiKeyKind } | undefined> {
  const [row] = await db.query<{ id: number; kind: ApiKeyKind }>(ACTIVE_BY_KEY, [hash]);
  return row ? { id: Number(row.id), kind: row.kind } : undefined;
}

export async function listApiKeys(db: Queryable): Promise<ApiKeyListing[]> {
  return (await db.query<ApiKeyListing>(LIST)).map((r) => ({ ...r, id: Number(r.id) }));
}

/**
 * Revokes by id, or by label when exactly one active key has it. Returns the revoked id, or a
 * reason it could not choose one.
 */
export async function revokeApiKey(db: Database, idOrLabel: string): Promise<{ id: number } | { error: string }> {
  let id: number | undefined;
  if (/^\d+$/.test(idOrLabel) && idOrLabel.length < 16) {
    id = Number(idOrLabel);
  } else {
    const rows = await db.query<{ id: number }>(BY_LABEL, [idOrLabel]);
    if (rows.length > 1) return { error: `${rows.length} active keys are labelled "${idOrLabel}"; revoke by id (see: ins key list)` };
    id = rows[0] ? Number(rows[0].id) : undefined;
  }
  if (id === undefined || (await db.query(REVOKE_BY_ID, [id])).length === 0) return { error: `no key "${idOrLabel}"` };
  await announceKeyChange(db);
  return { id };
}
