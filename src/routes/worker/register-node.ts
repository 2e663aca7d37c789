// POST /worker/register_node: opens a worker session and returns its token (ns_). Only for
// whoever holds the node's key: sent as `Authorization: Bearer`, the `api_key` header or the
// body's `secret` — or, for the real worker, which sends none, proven by a successful
// check_node_secret of this node from the same address within REGISTER_AFTER_CHECK_SECONDS.
// Each such check serves one registration (two workers behind one address check twice), and only while the key it proved is the node's (a
// rotation voids it); a request that offers a key is judged by that key alone, so a wrong key
// inside the window gets nothing. The check is used up in the transaction that opens the
// session: a registration that fails (an outage ridden out and retried) does not spend it.
import { RegisterNodeRequest, RegisterNodeResponses } from '../../generated/schemas.js';
import { findNodeForRegistration, REGISTER_AFTER_CHECK_SECONDS, useSecretCheck, type RegistrationNode } from '../../repositories/sessions.js';
import { HttpError } from '../../http/http-error.js';
import { bearerToken } from '../authenticate.js';
import { isKeyOf } from './check-node-secret.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';
import type { Queryable } from '../../db/database.js';

const UNPROVEN = "Registering a node takes its key: send it as Authorization: Bearer, or call /check_node_secret first";

export function registerNodeRoute(app: App, { service: { db, nodes }, limiters }: Deps): void {
  app.post('/worker/register_node', { schema: { body: RegisterNodeRequest, response: RegisterNodeResponses } }, (req) => rideOutage(async () => {
    const { node_url, node_version, stats, secret, capacity } = req.body;
    // 429 instead once the address is over its budget of failures; a proven registration is served.
    const refuse = (): never => limiters.failures.refuse(req.ip, new HttpError(401, UNPROVEN));
    const node = await findNodeForRegistration(db, node_url);
    if (!node) return refuse();
    const header = req.headers.api_key;
    const offered = [bearerToken(req), Array.isArray(header) ? header.at(-1) : header, secret].filter((k): k is string => typeof k === 'string' && k.length > 0);
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
      opened = await db.transaction(async (tx) => {
        const keyHash = await useSecretCheck(tx, node.id, req.ip, REGISTER_AFTER_CHECK_SECONDS);
        return keyHash === undefined ? refuse() : open(tx, node, keyHash);
      });
    }
    const { token, outcome } = opened;
    nodes.apply(outcome);
    return { access_token: token, token_type: 'bearer' };
  }));
}
