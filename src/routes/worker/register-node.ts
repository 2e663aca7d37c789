// POST /worker/register_node: opens a worker session and returns its token (ns_). Only for
// whoever holds the node's key: sent as `Authorization: Bearer`, the `api_key` header or the
// body's `secret` — or, for the real worker, which sends none, proven by a successful
// check_node_secret of this node from the same address within REGISTER_AFTER_CHECK_SECONDS.
import { RegisterNodeRequest, RegisterNodeResponses } from '../../generated/schemas.js';
import { findNodeForRegistration, hasRecentSecretCheck, openSession } from '../../repositories/sessions.js';
import { HttpError } from '../../http/http-error.js';
import { tooMany } from '../../http/rate-limit.js';
import { bearerToken } from '../authenticate.js';
import { isKeyOf } from './check-node-secret.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';

export const REGISTER_AFTER_CHECK_SECONDS = 60;

export function registerNodeRoute(app: App, { db, limiters }: Deps): void {
  app.post('/worker/register_node', { schema: { body: RegisterNodeRequest, response: RegisterNodeResponses } }, (req) => rideOutage(async () => {
    const blocked = limiters.failures.blockedFor(req.ip);
    if (blocked > 0) throw tooMany(blocked);
    const { node_url, node_version, stats, secret, capacity } = req.body;
    const node = await findNodeForRegistration(db, node_url);
    const header = req.headers.api_key;
    const offered = [bearerToken(req), Array.isArray(header) ? header.at(-1) : header, secret].filter((k): k is string => typeof k === 'string' && k.length > 0);
    const proven = node !== undefined && (offered.some((k) => isKeyOf(k, node.key_hash))
      || (await hasRecentSecretCheck(db, node.id, req.ip, REGISTER_AFTER_CHECK_SECONDS)));
    if (!node || !proven) {
      limiters.failures.fail(req.ip);
      throw new HttpError(401, "Registering a node takes its key: send it as Authorization: Bearer, or call /check_node_secret first");
    }
    req.nodeName = node.name;
    if (node.disabled) throw new HttpError(403, 'Node is disabled');
    const { token } = await openSession(db, {
      nodeId: node.id, nodeKeyHash: node.key_hash, nodeVersion: node_version ?? '', stats: (stats ?? {}), capacity: capacity ?? 1,
    });
    return { access_token: token, token_type: 'bearer' };
  }));
}
