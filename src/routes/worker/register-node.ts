// POST /worker/register_node: opens a worker session and returns its token (ns_). Only for
// whoever holds the node's key: sent as `Authorization: Bearer`, the `api_key` header or the
// body's `secret` — or, for the real worker, which sends none, proven by a successful
// check_node_secret of this node from the same address within REGISTER_AFTER_CHECK_SECONDS.
// Each such check serves one registration (two workers behind one address check twice), and only while the key it proved is the node's (a
// rotation voids it); a request that offers a key is judged by that key alone, so a wrong key
// inside the window gets nothing. The check is used up in the transaction that opens the
// session: a registration that fails (an outage ridden out and retried) does not spend it, nor
// does one whose answer never reached the worker (it gave up waiting or its connection broke
// first): that session is ended and the check given back, so the real worker's retry of the same
// request — it retries timeouts and broken connections, and a 401 would send it offline for
// hours — is served as the first would have been. A token delivered is the check's one use.
import type { ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { RegisterNodeRequest, RegisterNodeResponses } from '../../generated/schemas.js';
import { findNodeForRegistration, giveBackSecretCheck, REGISTER_AFTER_CHECK_SECONDS, useSecretCheck, type RegistrationNode } from '../../repositories/sessions.js';
import { HttpError } from '../../http/http-error.js';
import { bearerToken } from '../authenticate.js';
import { headerKey } from '../../http/credentials.js';
import { isKeyOf } from './check-node-secret.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';
import type { Queryable } from '../../db/database.js';

const UNPROVEN = "Registering a node takes its key: send it as Authorization: Bearer, or call /check_node_secret first";
const wrongKey = (node: string): string =>
  `The key sent is not node "${node}"'s key (was it rotated with \`ins node rotate-key\`, or is the node named otherwise?)`;

/** How long a keyless registration that found no check waits for one pending from its address to be given back. */
const PENDING_WAIT_MS = 5_000;

export function registerNodeRoute(app: App, { service: { db, nodes }, limiters }: Deps): void {
  // Keyless registrations not yet delivered nor given back, by node and address (this server's).
  const pending = new Map<string, Set<Promise<void>>>();
  app.post('/worker/register_node', { schema: { body: RegisterNodeRequest, response: RegisterNodeResponses } }, (req, reply) => rideOutage(async () => {
    const { node_url, node_version, stats, secret, capacity } = req.body;
    // Read now: once the client has gone, its socket no longer says where it was.
    const ip = req.ip;
    // 429 instead once the address is over its budget of failures; a proven registration is served.
    const offered = [bearerToken(req), headerKey(req), secret].filter((k): k is string => typeof k === 'string' && k.length > 0);
    // The same words whether or not a node of that name exists: a wrong key learns nothing more.
    const refusal = offered.length > 0 ? wrongKey(node_url) : UNPROVEN;
    const refuse = (): never => limiters.failures.refuse(ip, new HttpError(401, refusal));
    const node = await findNodeForRegistration(db, node_url);
    if (!node) return refuse();
    const open = (q: Queryable, n: RegistrationNode, keyHash: string) => {
      req.nodeName = n.name;
      if (n.disabled) throw new HttpError(403, 'Node is disabled');
      return nodes.register(q, { nodeId: n.id, nodeKeyHash: keyHash, nodeVersion: node_version ?? '', stats: (stats ?? {}), capacity: capacity ?? 1 });
    };
    let opened: Awaited<ReturnType<typeof open>>;
    if (offered.length > 0) {
      if (!offered.some((k) => isKeyOf(k, node.key_hash))) return refuse();
      opened = await open(db, node, node.key_hash);
    } else {
      // This registration is pending for its address until its answer is delivered or its check
      // given back; one that finds no check waits (a little) for those pending then, and tries
      // once more: the worker's retry, sent while the first still committed, would otherwise find
      // the check spent by a registration whose token nobody will read.
      const slot = `${node.id} ${ip}`;
      let settle: () => void = () => undefined;
      const mine = new Promise<void>((resolve) => { settle = resolve; });
      pending.set(slot, new Set([...(pending.get(slot) ?? []), mine]));
      mine.then(() => {
        const left = pending.get(slot);
        left?.delete(mine);
        if (left?.size === 0) pending.delete(slot);
      }, () => undefined);
      let handed = false;
      try {
        const keyless = () => db.transaction(async (tx) => {
          const check = await useSecretCheck(tx, node.id, ip, REGISTER_AFTER_CHECK_SECONDS);
          return check === undefined ? undefined : { check, session: await open(tx, node, check.key_hash) };
        });
        let got = await keyless();
        if (!got) {
          // Those pending now (the one whose commit spent the check among them, until it was
          // delivered or gave it back), then once more: a give-back done meanwhile is found too.
          const others = [...(pending.get(slot) ?? [])].filter((p) => p !== mine);
          if (others.length > 0) await Promise.race([Promise.all(others), sleep(PENDING_WAIT_MS, undefined, { ref: false })]);
          got = await keyless();
        }
        if (!got) return refuse();
        const { check, session } = got;
        opened = session;
        handed = true;
        whenUndelivered(reply.raw, settle, async () => {
          try {
            await giveBackSecretCheck(db, node.id, ip, check);
            await nodes.deregister(session.id);
            req.log.info({ node: node.name }, 'register_node: its answer did not reach the worker; the session is ended and the check given back for a retry');
          } catch (err) {
            req.log.warn({ err, node: node.name }, 'register_node: its answer did not reach the worker, and giving its check back failed');
          } finally {
            settle();
          }
        });
      } finally {
        if (!handed) settle();
      }
    }
    const { token, outcome } = opened;
    nodes.apply(outcome);
    return { access_token: token, token_type: 'bearer' };
  }));
}

/**
 * Runs `delivered` once the response, not sent yet, is handed whole to the OS ('finish'), or
 * `then` (which reports its own failures) if it closes before that — at once if its connection
 * has gone already.
 */
function whenUndelivered(res: ServerResponse, delivered: () => void, then: () => Promise<void>): void {
  const run = (): void => { then().catch(() => undefined); };
  if (res.destroyed) return run();
  let finished = false;
  res.once('finish', () => { finished = true; delivered(); });
  res.once('close', () => { if (!finished) run(); });
}
