// Who is calling: a key resolves to a principal by its hash. The kind is read from the key's
// prefix so each kind costs one indexed lookup; a new kind of key (e.g. the per-job keys of
// the planned dispatch endpoints) is one more case here. Keys without a known prefix are node
// keys too: nodes imported from the previous service keep their old keys.
import type { Queryable } from './db/database.js';
import { hashKey, keyKind } from './keys.js';
import { findNodeByKeyHash, type NodeRow } from './repositories/nodes.js';
import { findActiveReaderKey } from './repositories/reader-keys.js';

export type Principal = { kind: 'node'; node: NodeRow } | { kind: 'reader'; readerKeyId: number };

export async function authenticate(db: Queryable, key: string): Promise<Principal | undefined> {
  const hash = hashKey(key);
  if (key.length === 0) return undefined;
  if (keyKind(key) === 'reader') {
    const id = await findActiveReaderKey(db, hash);
    return id === undefined ? undefined : { kind: 'reader', readerKeyId: id };
  }
  const node = await findNodeByKeyHash(db, hash);
  return node && { kind: 'node', node };
}
