// POST /daily_points: a node's points per UTC day, for the node's own key or a reader key.
// The key is checked before the body (as FastAPI's APIKeyHeader dependency does): a request
// without a valid key learns nothing, not even which fields are wrong.
import type { FastifyRequest } from 'fastify';
import { DailyPointsRequest, DailyPointsResponses } from '../generated/schemas.js';
import type { Principal } from '../auth/principal.js';
import { authenticateRequest } from './authenticate.js';
import { HttpError } from '../http/http-error.js';
import type { App, Deps } from './types.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}

export function dailyPointsRoute(app: App, deps: Deps): void {
  const { points, limiters } = deps;
  app.post('/daily_points', {
    schema: {
      body: DailyPointsRequest,
      response: DailyPointsResponses,
    },
    ...(limiters.reads ? { preHandler: limiters.reads } : {}),
    preValidation: async (req: FastifyRequest) => {
      const header = req.headers.api_key;
      const key = Array.isArray(header) ? header[header.length - 1] : header;
      if (!key) throw new HttpError(401, 'Not authenticated');
      req.principal = await authenticateRequest(deps, req, key);
    },
  }, async (req, reply) => {
    const { node_name, last_days } = req.body;
    const principal = req.principal!;
    if (principal.kind === 'node') {
      req.nodeName = principal.node.name;
      if (principal.node.disabled) throw new HttpError(403, 'Node is disabled');
      // Another node's name is refused the same way whether or not it exists.
      if (principal.node.name !== node_name) throw new HttpError(403, "This key may only read its own node's points");
    }
    const days = await points.loadJson(node_name, last_days);
    if (days === undefined) throw new HttpError(404, 'Node not found');
    // Already the response's JSON (repositories/points.ts); a string is sent as it is.
    return reply.type('application/json; charset=utf-8').send(days as never);
  });
}
