// GET /get_points?node_name=: a node's points over all time, for the node itself (its session
// token, as the real worker sends it, or its key) or a reader key.
import { GetPointsQuery, GetPointsResponses } from '../generated/schemas.js';
import { nodeTotalPoints } from '../repositories/points.js';
import { HttpError } from '../http/http-error.js';
import { authenticateRequest, requestKey } from './authenticate.js';
import type { App, Deps } from './types.js';
import { rideOutage } from '../db/outage.js';

export function getPointsRoute(app: App, deps: Deps): void {
  app.get('/get_points', { schema: { querystring: GetPointsQuery, response: GetPointsResponses } }, (req) => rideOutage(async () => {
    const key = requestKey(req);
    if (!key) throw new HttpError(401, 'Not authenticated');
    const principal = await authenticateRequest(deps, req, key);
    const { node_name } = req.query;
    const own = principal.kind === 'session' ? principal.session.node : principal.kind === 'node' ? principal.node : undefined;
    if (own) {
      req.nodeName = own.name;
      if (own.disabled) throw new HttpError(403, 'Node is disabled');
      if (own.name !== node_name) throw new HttpError(403, "This key may only read its own node's points");
    } else if (principal.kind !== 'reader') {
      throw new HttpError(403, "This key cannot read nodes' points");
    }
    const total = await nodeTotalPoints(deps.db, node_name);
    if (total === undefined) throw new HttpError(404, 'Node not found');
    return { node_name, points: Math.round(total * 100) / 100, pointsraw: total };
  }));
}
