// POST /worker/deregister_node: ends the worker's session; its token stops working and the
// jobs it held go back to the queue at once. GET /worker/ping: liveness for workers.
import { DeregisterNodeRequest, DeregisterNodeResponses, PingResponses } from '../../generated/schemas.js';
import { authenticateSession } from '../authenticate.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';

export function deregisterNodeRoute(app: App, deps: Deps): void {
  const { nodes } = deps.service;
  app.post('/worker/deregister_node', { schema: { body: DeregisterNodeRequest, response: DeregisterNodeResponses } }, (req) =>
    rideOutage(async () => {
      const session = await authenticateSession(deps, req);
      // Ended, then its leases go back (the order is the node lifecycle's).
      await nodes.deregister(session.id);
      return { status: 'success' };
    }),
  );
  app.get('/worker/ping', { schema: { response: PingResponses } }, () => Promise.resolve({ status: 'ok' }));
}
