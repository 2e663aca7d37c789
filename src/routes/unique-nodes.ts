// GET /unique_nodes: the distinct nodes that served a model, optionally in a time window.
import { UniqueNodesQuery, UniqueNodesResponses } from '../generated/schemas.js';
import { RequestValidationError } from '../http/validator.js';
import { instantKey } from '../validation/datetime.js';
import { valueError } from '../validation/pydantic.js';
import type { App, Deps } from './types.js';

export function uniqueNodesRoute(app: App, { service: { rosters } }: Deps): void {
  app.get(
    '/unique_nodes',
    {
      schema: {
        querystring: UniqueNodesQuery,
        response: UniqueNodesResponses,
      },
    },
    async (req, reply) => {
      const { model_name } = req.query;
      const start = req.query.start_date ?? null;
      const end = req.query.end_date ?? null;
      if (start !== null && end !== null && instantKey(end) < instantKey(start)) {
        const raw = new URLSearchParams(req.url.split('?')[1] ?? '').getAll('end_date').at(-1);
        throw new RequestValidationError([valueError(['query', 'end_date'], 'end_date must not be before start_date', raw ?? end)]);
      }
      const { count, json } = await rosters.uniqueNodesJson(model_name, start, end);
      // Written here in the schema's field order, the names pre-serialised by the roster: for
      // thousands of names that is most of a request's cost otherwise.
      const body = `{"model_name":${JSON.stringify(model_name)},"start_date":${JSON.stringify(start)},"end_date":${JSON.stringify(end)},"count":${count},"nodes":${json}}`;
      return reply.type('application/json; charset=utf-8').send(body as never);
    },
  );
}
