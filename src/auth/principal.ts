// Who is calling: a key resolves to a principal by its hash. The kind is read from the key's
// prefix (keys.ts) so each kind costs one indexed lookup. Keys without a known prefix are node
// keys too: nodes imported from the previous service keep their old keys.
import type { Queryable } from '../db/database.js';
import { keyKind } from '../keys.js';
import { findNodeByKeyHash, type NodeRow } from '../repositories/nodes.js';
import { findActiveReaderKey } from '../repositories/reader-keys.js';

export type Principal = { kind: 'node'; node: NodeRow } | { kind: 'reader'; readerKeyId: number };

/** The principal of a key (whose hash is given), from the database. */
export async function lookupPrincipal(db: Queryable, key: string, hash: string): Promise<Principal | undefined> {
  if (keyKind(key) === 'reader') {
    const id = await findActiveReaderKey(db, hash);
    return id === undefined ? undefined : { kind: 'reader', readerKeyId: id };
  }
  const node = await findNodeByKeyHash(db, hash);
  return node && { kind: 'node', node };
}
