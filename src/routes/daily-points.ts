// POST /daily_points: a node's points per UTC day, for the node's own key (or session) or a
// reader key — the same rule as get_points and /network/nodes/{name} (routes/authenticate.ts
// checkNodeRead), with the key in the `api_key` header only, as the seed's dashboards send it.
// The key is checked before the body's fields (as FastAPI's APIKeyHeader dependency is): a
// request without a valid key learns nothing, not even which fields are wrong; a key that may
// not read the node learns nothing either, not even whether it exists. Malformed JSON is the one
// exception, as in FastAPI, which decodes the body before any dependency runs: 422 json_invalid.
import type { FastifyRequest } from 'fastify';
import { DailyPointsRequest, DailyPointsResponses } from '../generated/schemas.js';
import type { Principal } from '../auth/principal.js';
import { authenticateRequest, checkNodeRead } from './authenticate.js';
import { HttpError } from '../http/http-error.js';
import { headerKey } from '../http/credentials.js';
import { MalformedJson } from '../validation/pydantic.js';
import type { App, Deps } from './types.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}

export function dailyPointsRoute(app: App, deps: Deps): void {
  const { limiters } = deps;
  const { points } = deps.service;
  app.post(
    '/daily_points',
    {
      schema: {
        body: DailyPointsRequest,
        response: DailyPointsResponses,
      },
      ...(limiters.reads ? { preHandler: limiters.reads } : {}),
      preValidation: async (req: FastifyRequest) => {
        // FastAPI decodes the body before any dependency: malformed JSON is its 422, key or not.
        if (req.body instanceof MalformedJson) return;
        const key = headerKey(req);
        if (!key) throw new HttpError(401, 'Not authenticated');
        req.principal = await authenticateRequest(deps, req, key);
      },
    },
    async (req, reply) => {
      const { node_name, last_days } = req.body;
      checkNodeRead(req, req.principal!, node_name);
      const days = await points.loadJson(node_name, last_days);
      if (days === undefined) throw new HttpError(404, 'Node not found');
      // Already the response's JSON (repositories/points.ts); a string is sent as it is.
      return reply.type('application/json; charset=utf-8').send(days as never);
    },
  );
}
