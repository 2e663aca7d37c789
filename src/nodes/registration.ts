// Registering a worker session (POST /worker/register_node; the route is its schema, the
// refusals' words and the delivery of its answer): whoever holds the node's key, sent with the
// request — or, for the real worker, which sends none, proven by a successful
// check_node_secret of this node from the same address within REGISTER_AFTER_CHECK_SECONDS.
// Each such check serves one registration (two workers behind one address check twice), and
// only while the key it proved is the node's (a rotation voids it); a request that offers a key
// is judged by that key alone, so a wrong key inside the window gets nothing. The check is used
// up in the transaction that opens the session: a registration that fails (an outage ridden out
// and retried) does not spend it, nor does one whose answer never reached the worker (it gave
// up waiting or its connection broke first): the route then calls the hand-off's
// `undelivered()`, which ends that session and gives the check back, so the real worker's retry
// of the same request — it retries timeouts and broken connections, and a 401 would send it
// offline for hours — is served as the first would have been. A token delivered is the check's
// one use.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Database, Queryable } from '../db/database.js';
import { findNodeForRegistration, type RegistrationNode } from '../repositories/sessions.js';
import { giveBackSecretCheck, REGISTER_AFTER_CHECK_SECONDS, useSecretCheck } from './secret-checks.js';
import { isKeyOf } from '../keys.js';
import type { NodeOutcome } from './outcome.js';

/** What a worker asks for: its node's name, the keys it offered (none: a check's), its address, and the session's details. */
export interface Registration {
  name: string;
  offered: string[];
  address: string;
  nodeVersion: string;
  stats: Record<string, unknown>;
  capacity: number;
}

/** The session's answer once its outcome is applied; `handoff` when a check paid for it (the route tells whether it was delivered). */
export type Registered = { node: string; token: string; handoff?: Handoff };
/** Refused: no key offered and no check found (`unproven`), or not the node's key (`wrong_key`; an unknown node too: a wrong key learns nothing more). */
export type Refused = { refused: 'unproven' | 'wrong_key' };

/** A keyless registration's answer: exactly one of the two is called once the answer is delivered, or is known not to be. */
export interface Handoff {
  delivered: () => void;
  undelivered: () => Promise<void>;
}

export class NodeDisabledError extends Error {
  constructor(readonly node: string) {
    super('Node is disabled');
  }
}

/** How long a keyless registration that found no check waits for one pending from its address to be given back. */
const PENDING_WAIT_MS = 5_000;

/** The lifecycle's steps a registration uses (nodes/lifecycle.ts). */
export interface SessionOpener {
  open(q: Queryable, node: RegistrationNode, keyHash: string, r: Registration): Promise<{ id: number; token: string; outcome: NodeOutcome }>;
  apply(outcome: NodeOutcome): void;
  deregister(sessionId: number): Promise<void>;
}

/** One server's registrations: keyless ones not yet delivered nor given back, by node and address. */
export class Registrations {
  private readonly pending = new Map<string, Set<Promise<void>>>();

  constructor(
    private readonly db: Database,
    private readonly sessions: SessionOpener,
  ) {}

  async register(r: Registration): Promise<Registered | Refused> {
    const refused: Refused = { refused: r.offered.length > 0 ? 'wrong_key' : 'unproven' };
    const node = await findNodeForRegistration(this.db, r.name);
    if (!node) return refused;
    if (r.offered.length > 0) {
      if (!r.offered.some((k) => isKeyOf(k, node.key_hash))) return refused;
      const opened = await this.sessions.open(this.db, node, node.key_hash, r);
      this.sessions.apply(opened.outcome);
      return { node: node.name, token: opened.token };
    }
    return (await this.keyless(node, r)) ?? refused;
  }

  private async keyless(node: RegistrationNode, r: Registration): Promise<Registered | undefined> {
    // This registration is pending for its address until its answer is delivered or its check
    // given back; one that finds no check waits (a little) for those pending then, and tries
    // once more: the worker's retry, sent while the first still committed, would otherwise find
    // the check spent by a registration whose token nobody will read.
    const slot = `${node.id} ${r.address}`;
    let settle: () => void = () => undefined;
    const mine = new Promise<void>((resolve) => {
      settle = resolve;
    });
    this.pending.set(slot, new Set([...(this.pending.get(slot) ?? []), mine]));
    mine.then(
      () => {
        const left = this.pending.get(slot);
        left?.delete(mine);
        if (left?.size === 0) this.pending.delete(slot);
      },
      () => undefined,
    );
    let handed = false;
    try {
      const attempt = () =>
        this.db.transaction(async (tx) => {
          const check = await useSecretCheck(tx, node.id, r.address, REGISTER_AFTER_CHECK_SECONDS);
          return check === undefined ? undefined : { check, session: await this.sessions.open(tx, node, check.key_hash, r) };
        });
      let got = await attempt();
      if (!got) {
        // Those pending now (the one whose commit spent the check among them, until it was
        // delivered or gave it back), then once more: a give-back done meanwhile is found too.
        const others = [...(this.pending.get(slot) ?? [])].filter((p) => p !== mine);
        if (others.length > 0) await Promise.race([Promise.all(others), sleep(PENDING_WAIT_MS, undefined, { ref: false })]);
        got = await attempt();
      }
      if (!got) return undefined;
      const { check, session } = got;
      this.sessions.apply(session.outcome);
      handed = true;
      return {
        node: node.name,
        token: session.token,
        handoff: {
          delivered: settle,
          undelivered: async () => {
            try {
              await giveBackSecretCheck(this.db, node.id, r.address, check);
              await this.sessions.deregister(session.id);
            } finally {
              settle();
            }
          },
        },
      };
    } finally {
      if (!handed) settle();
    }
  }
}
