// Reader and user keys' writes (the CLI's ins key add, quota, priority, delivery): statements of
// nodes/sql/keys.ts, the one home of every write to api_keys. Revoking is the node lifecycle's
// transition (nodes/lifecycle.ts revokeKey): key caches forget on its announcement.
import type { Queryable } from '../db/database.js';
import { newKey } from '../keys.js';
import { resolveKey, type ApiKeyKind, type KeyDelivery } from '../repositories/api-keys.js';
import { INSERT_KEY, SET_DELIVERY, SET_PRIORITY, SET_QUOTA } from './sql/keys.js';

export async function addApiKey(db: Queryable, kind: ApiKeyKind, label: string): Promise<{ id: number; key: string }> {
  const { key, hash } = newKey(kind);
  const [row] = await db.query<{ id: number }>(INSERT_KEY, [kind, label, hash]);
  return { id: Number(row!.id), key };
}

/**
 * Sets a user key's daily quotas (by id or label): a number, null (back to the configured
 * default), or undefined (unchanged). Counted from the next submission on. Answers the key's
 * quotas as they now are.
 */
export async function setKeyQuota(
  db: Queryable,
  idOrLabel: string,
  jobs: number | null | undefined,
  tokens: number | null | undefined,
): Promise<KeyQuota | { error: string }> {
  const r = await resolveKey(db, idOrLabel, 'set it');
  if ('error' in r) return r;
  const [row] =
    r.id === undefined ? [] : await db.query<KeyQuota>(SET_QUOTA, [r.id, jobs !== undefined, jobs ?? null, tokens !== undefined, tokens ?? null]);
  return row ? { id: Number(row.id), jobs: row.jobs, tokens: row.tokens } : { error: `no user key "${idOrLabel}"` };
}

/** A user key's own daily quotas after a change: null where the configured default applies. */
export interface KeyQuota {
  id: number;
  jobs: number | null;
  tokens: number | null;
}

/** Sets a user key's priority (its weight in each model's fair queue; 1 by default). */
export async function setKeyPriority(db: Queryable, idOrLabel: string, priority: number): Promise<{ id: number } | { error: string }> {
  const r = await resolveKey(db, idOrLabel, 'set it');
  if ('error' in r) return r;
  if (r.id === undefined || (await db.query(SET_PRIORITY, [r.id, priority])).length === 0) return { error: `no user key "${idOrLabel}"` };
  return { id: r.id };
}

/** Sets a user key's delivery: checked holds every answer of the key until a check of it passed (from the next submission on). */
export async function setKeyDelivery(db: Queryable, idOrLabel: string, delivery: KeyDelivery): Promise<{ id: number } | { error: string }> {
  const r = await resolveKey(db, idOrLabel, 'set it');
  if ('error' in r) return r;
  if (r.id === undefined || (await db.query(SET_DELIVERY, [r.id, delivery])).length === 0) return { error: `no user key "${idOrLabel}"` };
  return { id: r.id };
}
