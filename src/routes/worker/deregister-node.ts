// POST /worker/deregister_node: ends the worker's session; its token stops working and the
// jobs it held go back to the queue at once. GET /worker/ping: liveness for workers.
import { DeregisterNodeRequest, DeregisterNodeResponses, PingResponses } from '../../generated/schemas.js';
import { endSession } from '../../repositories/sessions.js';
import { announceKeyChange } from '../../repositories/key-events.js';
import { authenticateSession } from '../authenticate.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';

export function deregisterNodeRoute(app: App, deps: Deps): void {
  const { db, coordinator } = deps.service;
  app.post('/worker/deregister_node', { schema: { body: DeregisterNodeRequest, response: DeregisterNodeResponses } }, (req) => rideOutage(async () => {
    const session = await authenticateSession(deps, req);
    // Ended first, so no new lease can reach it; then its leases go back.
    await endSession(db, session.id);
    await announceKeyChange(db);
    await coordinator.endSession(session.id);
    return { status: 'success' };
  }));
  app.get('/worker/ping', { schema: { response: PingResponses } }, () => Promise.resolve({ status: 'ok' }));
}
