// Reader keys: dashboards' keys that may read any node's daily points and cannot report.
import { sql, type Queryable } from '../db/database.js';
import { newKey } from '../keys.js';
import { announceKeyChange } from './key-events.js';

export interface ReaderKeyListing { id: number; label: string; revoked: boolean; created_at: string }

const INSERT = sql('reader_keys_insert', 'INSERT INTO reader_keys (label, key_hash) VALUES ($1::text, $2::text) RETURNING id');
const ACTIVE_BY_KEY = sql('reader_keys_by_key', 'SELECT id FROM reader_keys WHERE key_hash = $1::text AND revoked_at IS NULL');
const LIST = sql('reader_keys_list', `SELECT id, label, revoked_at IS NOT NULL AS revoked,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created_at
  FROM reader_keys ORDER BY id`);
const REVOKE_BY_ID = sql('reader_keys_revoke_id', 'UPDATE reader_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1::bigint RETURNING id');
const BY_LABEL = sql('reader_keys_by_label', 'SELECT id FROM reader_keys WHERE label = $1::text AND revoked_at IS NULL');

export async function addReaderKey(db: Queryable, label: string): Promise<{ id: number; key: string }> {
  const { key, hash } = newKey('reader');
  const [row] = await db.query<{ id: number }>(INSERT, [label, hash]);
  return { id: Number(row!.id), key };
}

export async function findActiveReaderKey(db: Queryable, hash: string): Promise<number | undefined> {
  const [row] = await db.query<{ id: number }>(ACTIVE_BY_KEY, [hash]);
  return row ? Number(row.id) : undefined;
}

export async function listReaderKeys(db: Queryable): Promise<ReaderKeyListing[]> {
  return (await db.query<ReaderKeyListing>(LIST)).map((r) => ({ ...r, id: Number(r.id) }));
}

/**
 * Revokes by id, or by label when exactly one active key has it. Returns the revoked id, or a
 * reason it could not choose one.
 */
export async function revokeReaderKey(db: Queryable, idOrLabel: string): Promise<{ id: number } | { error: string }> {
  let id: number | undefined;
  if (/^\d+$/.test(idOrLabel) && idOrLabel.length < 16) {
    id = Number(idOrLabel);
  } else {
    const rows = await db.query<{ id: number }>(BY_LABEL, [idOrLabel]);
    if (rows.length > 1) return { error: `${rows.length} active reader keys are labelled "${idOrLabel}"; revoke by id (see: ins key list)` };
    id = rows[0] ? Number(rows[0].id) : undefined;
  }
  if (id === undefined || (await db.query(REVOKE_BY_ID, [id])).length === 0) return { error: `no reader key "${idOrLabel}"` };
  await announceKeyChange(db);
  return { id };
}
