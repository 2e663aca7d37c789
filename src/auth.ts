// Who is calling: a key resolves to a principal by its hash. The kind is read from the key's
// prefix so each kind costs one indexed lookup; a new kind of key (e.g. the per-job keys of
// the planned dispatch endpoints) is one more case here. Keys without a known prefix are node
// keys too: nodes imported from the previous service keep their old keys.
import type { Queryable } from './db/database.js';
import type { PrincipalCache } from './auth-cache.js';
import { hashKey, keyKind } from './keys.js';
import { findNodeByKeyHash, type NodeRow } from './repositories/nodes.js';
import { findActiveReaderKey } from './repositories/reader-keys.js';

export type Principal = { kind: 'node'; node: NodeRow } | { kind: 'reader'; readerKeyId: number };

export async function authenticate(db: Queryable, key: string, cache?: PrincipalCache, onLookup?: (source: 'cache' | 'database') => void): Promise<Principal | undefined> {
  if (key.length === 0) return undefined;
  const hash = hashKey(key);
  const cached = cache?.get(hash);
  onLookup?.(cached ? 'cache' : 'database');
  if (cached) return cached;
  const generation = cache?.begin() ?? 0;
  const principal = await lookup(db, key, hash);
  if (principal) cache?.set(hash, principal, generation);
  return principal;
}

async function lookup(db: Queryable, key: string, hash: string): Promise<Principal | undefined> {
  if (keyKind(key) === 'reader') {
    const id = await findActiveReaderKey(db, hash);
    return id === undefined ? undefined : { kind: 'reader', readerKeyId: id };
  }
  const node = await findNodeByKeyHash(db, hash);
  return node && { kind: 'node', node };
}
