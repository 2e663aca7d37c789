// GET /get_points?node_name=: a node's points over all time, for the node itself (its session
// token, as the real worker sends it, or its key) or a reader key.
import { GetPointsQuery, GetPointsResponses } from '../generated/schemas.js';
import { HttpError } from '../http/http-error.js';
import { authorizeNodeRead } from './authenticate.js';
import type { App, Deps } from './types.js';
import { rideOutage } from '../db/outage.js';

export function getPointsRoute(app: App, deps: Deps): void {
  app.get('/get_points', { schema: { querystring: GetPointsQuery, response: GetPointsResponses } }, (req) =>
    rideOutage(async () => {
      const { node_name } = req.query;
      await authorizeNodeRead(deps, req, node_name);
      const total = await deps.service.points.total(node_name);
      if (total === undefined) throw new HttpError(404, 'Node not found');
      return { node_name, points: Math.round(total * 100) / 100, pointsraw: total };
    }),
  );
}
