// POST /check_node_secret: is `secret` the key of node `node_id`? Real workers ask right
// before register_node, which then trusts this address for that node once a check, for a short while,
// while that key is still the node's (routes/worker/register-node.ts).
import { timingSafeEqual } from 'node:crypto';
import { CheckNodeSecretRequest, CheckNodeSecretResponses } from '../../generated/schemas.js';
import { hashKey } from '../../keys.js';
import { findNodeForRegistration, recordSecretCheck, REGISTER_AFTER_CHECK_SECONDS } from '../../repositories/sessions.js';
import { HttpError } from '../../http/http-error.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';

/** Whether `key` is the key whose SHA-256 is `hash`, without key-dependent timing. */
export function isKeyOf(key: string, hash: string): boolean {
  return key.length > 0 && timingSafeEqual(Buffer.from(hashKey(key)), Buffer.from(hash));
}

export function checkNodeSecretRoute(app: App, { service: { db }, limiters }: Deps): void {
  app.post('/check_node_secret', { schema: { body: CheckNodeSecretRequest, response: CheckNodeSecretResponses } }, (req) => rideOutage(async () => {
    const { node_id, secret } = req.body;
    // Read now: once the client has gone, its socket no longer says where it was.
    const ip = req.ip;
    const node = await findNodeForRegistration(db, node_id);
    // An unknown node and a wrong secret get the same answer (429 once the address is over its budget of failures).
    if (!node || !isKeyOf(secret, node.key_hash)) return limiters.failures.refuse(ip, new HttpError(401, 'Invalid node secret'));
    req.nodeName = node.name;
    if (node.disabled) throw new HttpError(403, 'Node is disabled');
    await recordSecretCheck(db, node.id, ip, node.key_hash, REGISTER_AFTER_CHECK_SECONDS);
    return { status: 'success' };
  }));
}
