// Who is calling: a key or token resolves to a principal by its hash. The kind is read from
// the prefix (keys.ts) so each kind costs one indexed lookup. Keys without a known prefix are
// node keys too: nodes imported from the previous service keep their old keys. Job keys (jk_)
// are no principal: they name a lease, and only update_result takes them (jobs/).
import type { Queryable } from '../db/database.js';
import { keyKind } from '../keys.js';
import { findActiveApiKey } from '../repositories/api-keys.js';
import { findNodeByKeyHash, type NodeRow } from '../repositories/nodes.js';
import { findSessionByTokenHash, type SessionRow } from '../repositories/sessions.js';

// What a route is told of the node or session it serves (routes import no repositories/).
export type { NodeRow, SessionRow };

export type Principal =
  | { kind: 'node'; node: NodeRow }
  | { kind: 'reader'; readerKeyId: number }
  | { kind: 'user'; userKeyId: number }
  | { kind: 'session'; session: SessionRow };

export interface LookupOptions {
  /** How long a session's model declaration lasts (MODELS_TTL), in seconds. */
  modelsTtlSeconds: number;
}

/** The principal of a key (whose hash is given), from the database. */
export async function lookupPrincipal(db: Queryable, key: string, hash: string, opts: LookupOptions): Promise<Principal | undefined> {
  switch (keyKind(key)) {
    case 'reader':
    case 'user': {
      const found = await findActiveApiKey(db, hash);
      // The prefix must match the stored kind: a key is only what it was issued as.
      if (!found || found.kind !== keyKind(key)) return undefined;
      return found.kind === 'reader' ? { kind: 'reader', readerKeyId: found.id } : { kind: 'user', userKeyId: found.id };
    }
    case 'session': {
      const session = await findSessionByTokenHash(db, hash, opts.modelsTtlSeconds);
      return session && { kind: 'session', session };
    }
    case 'job':
      return undefined;
    default: {
      const node = await findNodeByKeyHash(db, hash);
      return node && { kind: 'node', node };
    }
  }
}
