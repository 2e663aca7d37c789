// Authentication with a cache: remembers which principal a key hash belongs to, so an
// authenticated request costs one database round trip instead of two. Correctness rests on
// invalidation, not on the TTL: every change of a key or of a node's status is announced
// (src/nodes/lifecycle.ts, repositories/key-events.ts: in this process at once, to other
// servers by NOTIFY) and each server's cache, a consumer of the node lifecycle, clears on it. While the LISTEN connection is down the cache is off,
// so a missed notification can never serve a revoked key. The TTL only bounds memory of keys
// nobody uses any more.
import type { Queryable } from '../db/database.js';
import { hashKey } from '../keys.js';
import type { NodeConsumer, NodeOutcome } from '../nodes/outcome.js';
import { lookupPrincipal, type LookupOptions, type Principal } from './principal.js';

export type { Principal } from './principal.js';

export interface AuthenticateOptions extends LookupOptions {
  cache?: PrincipalCache;
  onLookup?: (source: 'cache' | 'database') => void;
}

/** The key's principal, from the cache when it holds it; undefined for an unknown key. */
export async function authenticate(db: Queryable, key: string, opts: AuthenticateOptions): Promise<Principal | undefined> {
  if (key.length === 0) return undefined;
  const { cache } = opts;
  const hash = hashKey(key);
  const cached = cache?.get(hash);
  opts.onLookup?.(cached ? 'cache' : 'database');
  if (cached) return cached;
  const generation = cache?.begin() ?? 0;
  const principal = await lookupPrincipal(db, key, hash, opts);
  if (principal) cache?.set(hash, principal, generation);
  return principal;
}

export class PrincipalCache implements NodeConsumer {
  private readonly entries = new Map<string, { principal: Principal; at: number }>();
  private live = false;
  // Bumped on every invalidation: a lookup that started before it must not store its answer.
  private generation = 0;

  constructor(
    private readonly ttlMs = 60_000,
    private readonly maxEntries = 100_000,
  ) {}

  get(hash: string): Principal | undefined {
    if (!this.live) return undefined;
    const e = this.entries.get(hash);
    if (!e) return undefined;
    if (Date.now() - e.at > this.ttlMs) {
      this.entries.delete(hash);
      return undefined;
    }
    return e.principal;
  }

  /** The generation to pass to set() once the lookup is done. */
  begin(): number {
    return this.generation;
  }

  set(hash: string, principal: Principal, generation: number): void {
    if (!this.live || generation !== this.generation) return;
    if (this.entries.size >= this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(hash, { principal, at: Date.now() });
  }

  invalidate(): void {
    this.generation++;
    this.entries.clear();
  }

  setLive(live: boolean): void {
    this.live = live;
    this.invalidate();
  }

  /**
   * A node or key changed, here or on another server. A node added or a session opened changes
   * nothing cached (only keys and sessions found are kept); anything else may have.
   */
  apply(o: NodeOutcome): void {
    if (o.change !== 'added' && o.change !== 'registered') this.invalidate();
  }
}
