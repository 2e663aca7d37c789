// POST /check_node_secret: is `secret` the key of node `node_id`? Real workers ask right
// before register_node, which then trusts this address for that node once a check, for a short while,
// while that key is still the node's (routes/worker/register-node.ts).
import { CheckNodeSecretRequest, CheckNodeSecretResponses } from '../../generated/schemas.js';
import { NodeDisabledError } from '../../nodes/registration.js';
import { HttpError } from '../../http/http-error.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';

export function checkNodeSecretRoute(app: App, { service: { nodes }, limiters }: Deps): void {
  app.post('/check_node_secret', { schema: { body: CheckNodeSecretRequest, response: CheckNodeSecretResponses } }, (req) =>
    rideOutage(async () => {
      const { node_id, secret } = req.body;
      // Read now: once the client has gone, its socket no longer says where it was.
      const ip = req.ip;
      const checked = await nodes.checkSecret(node_id, secret, ip);
      // An unknown node and a wrong secret get the same answer (429 once the address is over its budget of failures).
      if (checked === undefined) return limiters.failures.refuse(ip, new HttpError(401, 'Invalid node secret'));
      req.nodeName = checked.node;
      if (checked instanceof NodeDisabledError) throw new HttpError(403, checked.message);
      return { status: 'success' };
    }),
  );
}
