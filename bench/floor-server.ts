// The least a request could cost the server on this machine (bench/request-cost.ts, its "floor"
// row): Fastify with the server's own logger (src/server.ts createLogger: asynchronous writes,
// the redaction paths) and one access line per request as src/app.ts writes it, answering a
// pending poll's 404 from a Map — no authentication, validation, metrics, rate limits or other
// hooks of ours, no database. Started by the bench as `node --import tsx bench/floor-server.ts`
// with PORT set; answers /readyz as the server does.
import Fastify, { LogController } from 'fastify';
import { createLogger } from '../src/server.js';

const app = Fastify({ loggerInstance: createLogger('info'), logController: new LogController({ disableRequestLogging: true }) });
app.addHook('onResponse', async (req, reply) => {
  req.log.info(
    { method: req.method, route: req.routeOptions.url ?? 'unmatched', status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100 },
    'request',
  );
});
const open = new Map<string, 'queued' | 'leased'>();
app.get<{ Params: { job_id: string } }>('/get_result/:job_id', async (req, reply) => {
  const state = open.get(req.params.job_id) ?? 'queued';
  open.set(req.params.job_id, state);
  return reply.code(404).send({ detail: 'Job not finished', state, position: null, eta_seconds: null });
});
app.get('/readyz', (_req, reply) => reply.send({ status: 'ok' }));
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
