// The node lifecycle: every state change of a node runs here, as one named statement of
// src/nodes/sql/ (add, access: disable/enable, rotate, sessions: register/deregister,
// standing: strike/agree/restore), each announcing what it changed inside its own transaction
// (nodes_announce(), migrations/0016_node_lifecycle.sql), and every statement's outcome
// (nodes/outcome.ts) goes through one function, apply(), to every consumer of this server —
// the key and session cache (auth/authenticate.ts), the dispatcher (its waiting polls), the
// metrics — whichever transition produced it, here or elsewhere: another server hears the
// NOTIFY, another lifecycle on the same database in this process (a CLI command run inside the
// server, a second app in a test) hears it at once through the database's in-process events,
// before the change's command even answers. The states and their diagram: nodes/states.ts.
//
// Ordering rules live here, not in the routes or the CLI: a change that ends access (disable,
// rotate key, deregister) commits first, so no new lease can reach the node, then its leases go
// back to the queue through the job lifecycle (jobs/lifecycle.ts release).
import { randomBytes } from 'node:crypto';
import type { Database, Queryable } from '../db/database.js';
import { pgCode, UNIQUE_VIOLATION } from '../db/errors.js';
import { newKey } from '../keys.js';
import { LOCAL_KEY_EVENT } from '../repositories/key-events.js';
import { findNodeForRegistration, type RegistrationNode } from '../repositories/sessions.js';
import { declareSet, type DeclaredSet } from './sql/declare.js';
import { recordSecretCheck, REGISTER_AFTER_CHECK_SECONDS } from './secret-checks.js';
import { isKeyOf } from '../keys.js';
import { declareSession, type Declaration } from './declaration.js';
import { NodeDisabledError, Registrations, type Refused, type Registered, type Registration } from './registration.js';
import { NODES_CHANNEL, itemOf, parseItem, parsePayload, type NodeConsumer, type NodeOutcome } from './outcome.js';
import { ADD } from './sql/add.js';
import { SET_ACCESS } from './sql/access.js';
import { ROTATE } from './sql/rotate.js';
import { DEREGISTER, REGISTER } from './sql/sessions.js';
import { RESTORE } from './sql/standing.js';
import { REVOKE_KEY } from './sql/keys.js';
import { resolveKey } from '../repositories/api-keys.js';

/**
 * The leases a change that ended access hands back: a session's, or a node's (its whole key).
 * The job lifecycle (jobs/lifecycle.ts release, one layer up) is one: this layer names only what
 * it asks of it.
 */
export type ReleaseWhich = { sessionId: number } | { nodeId: number };
/** The job lifecycle, as ending a node's access uses it (leases end as given back: `released`). */
export interface LeaseRelease {
  release(which: ReleaseWhich, outcome: 'released'): Promise<void>;
}

export class NodeExistsError extends Error {
  constructor(name: string) {
    super(`a node named "${name}" already exists`);
  }
}

/** Payloads heard through the in-process events, whose NOTIFY is still to come (at most this many remembered). */
const HEARD_LIMIT = 1_000;

export class NodeLifecycle {
  /** This lifecycle's id in announcements: it skips its own, having applied them already. */
  readonly server = randomBytes(6).toString('hex');
  private readonly consumers: NodeConsumer[] = [];
  private readonly heard = new Map<string, number>();
  private readonly registrations: Registrations;

  /** `jobs`: where leases go back (absent: nobody holds them, e.g. a test's setup). */
  constructor(
    readonly db: Database,
    private readonly jobs?: LeaseRelease,
    private readonly onError: (err: unknown) => void = () => {},
  ) {
    this.registrations = new Registrations(db, {
      open: (q, node, keyHash, r) => this.open(q, node, keyHash, r),
      apply: (o) => this.apply(o),
      deregister: (id) => this.deregister(id),
    });
  }

  use(consumer: NodeConsumer): void {
    this.consumers.push(consumer);
  }

  /**
   * The one way an outcome reaches the consumers; `local`: this server's statement made it (it is
   * then told to the other lifecycles of this database in this process, at once).
   */
  apply(outcome: NodeOutcome, local = true): void {
    for (const c of this.consumers) {
      try {
        c.apply(outcome, local);
      } catch (err) {
        this.onError(err);
      }
    }
    if (local) this.db.events.emit(LOCAL_KEY_EVENT, this.server, itemOf(outcome));
  }

  /**
   * Hears every other lifecycle's announcements, in this process and through NOTIFY (one that
   * came both ways is applied once); resolves to the stop function.
   */
  async listen(): Promise<() => Promise<void>> {
    const inProcess = (server: string, item: string): void => {
      if (server === this.server) return;
      const payload = `${server} ${item}`;
      if (this.heard.size >= HEARD_LIMIT) this.heard.clear();
      this.heard.set(payload, (this.heard.get(payload) ?? 0) + 1);
      this.apply(parseItem(item), false);
    };
    this.db.events.on(LOCAL_KEY_EVENT, inProcess);
    const stop = await this.db.listen(
      NODES_CHANNEL,
      (payload) => {
        const { server, outcome } = parsePayload(payload);
        if (server === this.server) return;
        const n = this.heard.get(payload);
        if (n !== undefined) {
          if (n <= 1) this.heard.delete(payload);
          else this.heard.set(payload, n - 1);
          return;
        }
        this.apply(outcome, false);
      },
      (live) => {
        this.heard.clear();
        for (const c of this.consumers) c.setLive?.(live);
      },
    );
    return async () => {
      this.db.events.off(LOCAL_KEY_EVENT, inProcess);
      await stop();
    };
  }

  /** node add: the new node's id and key, which exists nowhere else afterwards. */
  async add(name: string): Promise<{ id: number; key: string }> {
    const { key, hash } = newKey('node');
    let row: { id: number; announced: string } | undefined;
    try {
      [row] = await this.db.query<{ id: number; announced: string }>(ADD, [name, hash, this.server]);
    } catch (err) {
      if (pgCode(err) === UNIQUE_VIOLATION) throw new NodeExistsError(name);
      throw err;
    }
    this.apply(parseItem(row!.announced));
    return { id: Number(row!.id), key };
  }

  /** disable: its key gets 403 from this commit, then the leases it holds go back. Undefined: no such node. */
  disable(name: string): Promise<number | undefined> {
    return this.setAccess(name, true);
  }

  /** enable: the node's standing again. Undefined: no such node. */
  enable(name: string): Promise<number | undefined> {
    return this.setAccess(name, false);
  }

  /** rotate key: the old key and its sessions stop working with this commit, then its leases go back. Undefined: no such node. */
  async rotate(name: string): Promise<{ id: number; key: string } | undefined> {
    const { key, hash } = newKey('node');
    const [row] = await this.db.query<{ id: number; announced: string }>(ROTATE, [name, hash, this.server]);
    if (!row) return undefined;
    await this.ended(parseItem(row.announced), { nodeId: Number(row.id) });
    return { id: Number(row.id), key };
  }

  /**
   * register: opens a worker session for whoever proves the node's key (nodes/registration.ts),
   * its transaction and, for a keyless registration, the give-back of its check when the answer
   * is not delivered. The token exists nowhere else afterwards. Throws NodeDisabledError.
   */
  register(r: Registration): Promise<Registered | Refused> {
    return this.registrations.register(r);
  }

  /**
   * check_node_secret: whether `secret` is the node's key; if so, its address may register the
   * node once without the key (nodes/registration.ts). Undefined: unknown node or wrong secret.
   */
  async checkSecret(name: string, secret: string, address: string): Promise<{ node: string } | NodeDisabledError | undefined> {
    const node = await findNodeForRegistration(this.db, name);
    if (!node || !isKeyOf(secret, node.key_hash)) return undefined;
    if (node.disabled) return new NodeDisabledError(node.name);
    await recordSecretCheck(this.db, node.id, address, node.key_hash, REGISTER_AFTER_CHECK_SECONDS);
    return { node: node.name };
  }

  /** Opens the session (inside `q`, the registration's transaction); the outcome is applied once that commits. */
  async open(
    q: Queryable,
    node: RegistrationNode,
    keyHash: string,
    r: Pick<Registration, 'nodeVersion' | 'stats' | 'capacity'>,
  ): Promise<{ id: number; token: string; outcome: NodeOutcome }> {
    if (node.disabled) throw new NodeDisabledError(node.name);
    const { key, hash } = newKey('session');
    const [row] = await q.query<{ id: number; announced: string }>(REGISTER, [
      node.id,
      hash,
      keyHash,
      r.nodeVersion,
      JSON.stringify(r.stats),
      r.capacity,
      this.server,
    ]);
    return { id: Number(row!.id), token: key, outcome: parseItem(row!.announced) };
  }

  /** deregister: the session's token stops working with this commit, then the leases it holds go back. */
  async deregister(sessionId: number): Promise<void> {
    const [row] = await this.db.query<{ announced: string }>(DEREGISTER, [sessionId, this.server]);
    if (row) this.apply(parseItem(row.announced));
    // Also when it had ended already (a retried call): what it still holds goes back.
    await this.jobs?.release({ sessionId }, 'released');
  }

  /**
   * declare: the session's models and builds (sql/declare.ts, whose statement announces a
   * changed set: sessions are cached with their models). Whether the set changed; undefined: no
   * live session.
   */
  async declare(sessionId: number, modelIds: number[], d: DeclaredSet = {}): Promise<boolean | undefined> {
    const announced = await declareSet(this.db, sessionId, modelIds, d, this.server);
    if (announced) this.apply(parseItem(announced));
    return announced === undefined ? undefined : announced !== null;
  }

  /**
   * update_models: the session's models, capabilities, builds and contexts (nodes/declaration.ts);
   * undefined: no live session. Throws DeclarationRefused.
   */
  declareModels(
    session: { id: number; nodeId: number },
    d: Declaration,
    windows: { onlineWindow: number; modelsTtl: number },
  ): Promise<{ names: string[]; ignored: string[] } | undefined> {
    return declareSession(this.db, (id, models, set) => this.declare(id, models, set), session, d, windows);
  }

  /** restore (ins node reinstate): back to trusted, strikes so far forgotten; false when the node is trusted already or unknown. */
  async restore(name: string): Promise<boolean> {
    const [row] = await this.db.query<{ announced: string }>(RESTORE, [name, this.server]);
    if (row) this.apply(parseItem(row.announced));
    return row !== undefined;
  }

  /**
   * key revoke: a reader or user key, by id or by its label when one active key has it; from
   * this commit its requests get 401. The revoked id, or why no key was chosen.
   */
  async revokeKey(idOrLabel: string): Promise<{ id: number } | { error: string }> {
    const r = await resolveKey(this.db, idOrLabel, 'revoke');
    if ('error' in r) return r;
    const [row] = r.id === undefined ? [] : await this.db.query<{ id: number; announced: string | null }>(REVOKE_KEY, [r.id, this.server]);
    if (!row) return { error: `no key "${idOrLabel}"` };
    if (row.announced) this.apply(parseItem(row.announced));
    return { id: Number(row.id) };
  }

  private async setAccess(name: string, disabled: boolean): Promise<number | undefined> {
    const [row] = await this.db.query<{ id: number; announced: string }>(SET_ACCESS, [name, disabled, this.server]);
    if (!row) return undefined;
    const outcome = parseItem(row.announced);
    if (disabled) await this.ended(outcome, { nodeId: Number(row.id) });
    else this.apply(outcome);
    return Number(row.id);
  }

  /** A change that ended access committed: told, then the leases go back. */
  private async ended(outcome: NodeOutcome, which: ReleaseWhich): Promise<void> {
    this.apply(outcome);
    await this.jobs?.release(which, 'released');
  }
}

// The transitions by themselves, through a lifecycle of their own with no consumer and no
// leases to hand back (set-up of tests and benchmarks, bulk tools): their announcements reach
// every server as another server's.

/** node add; throws NodeExistsError when the name is taken. */
export const createNode = (db: Database, name: string): Promise<{ id: number; key: string }> => new NodeLifecycle(db).add(name);
/** disable or enable; the node's id, undefined when no node has this name. */
export const setNodeDisabled = (db: Database, name: string, disabled: boolean): Promise<number | undefined> =>
  disabled ? new NodeLifecycle(db).disable(name) : new NodeLifecycle(db).enable(name);
/** rotate key; undefined: no such node. */
export const rotateNodeKey = (db: Database, name: string): Promise<{ id: number; key: string } | undefined> => new NodeLifecycle(db).rotate(name);
/** key revoke, by id or label; the id, or why no key was chosen. */
export const revokeApiKey = (db: Database, idOrLabel: string): Promise<{ id: number } | { error: string }> =>
  new NodeLifecycle(db).revokeKey(idOrLabel);
