// CORS for the OpenAI-compatible API (docs/openai.md, "Browsers"): browser apps call /v1 with the
// user key in a Bearer header, never with cookies, so allowing an origin lends it no ambient
// credentials; CORS_ORIGINS only says which pages' scripts may read the answers. The rest of the
// service (worker wire, dashboard, admin) sends no CORS header, and no `Vary: Origin` either; the
// seed's unprefixed aliases (/chat/completions, /models) neither: browsers use /v1.
//
// One onRequest hook whose first step is a look at the path: every other request pays that
// and nothing more. (It was @fastify/cors with a delegator, which normalised its options and
// added `Vary: Origin` on every request of the service: 0.10 ms of the server's CPU per job in
// the seed's poll mode, docs/benchmarks.md.) The headers are those that plugin wrote for these
// options, fixed once here: `Vary: Origin` and the exposed headers on every /v1 answer, the
// allowed origin when the page's is allowed; a preflight (OPTIONS, with or without Origin) is
// answered 204 with the methods, the request's own headers allowed back (the SDKs send their
// x-stainless-* headers, and nothing in a header grants more than the key does) and a max-age.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { REQUEST_ID_HEADER } from './request-id.js';
import type { CorsOrigins } from '../config.js';

/** Headers a page's script may read besides the simple ones: the ids and the rate limits. */
const EXPOSED = [REQUEST_ID_HEADER, 'retry-after', 'x-ratelimit-limit-requests', 'x-ratelimit-remaining-requests', 'x-ratelimit-reset-requests'].join(
  ', ',
);
const METHODS = 'GET, POST, DELETE';
const MAX_AGE = '600';

/** The route label of a preflight this hook answered (metrics, access log): no route matched it, but it is not a stray 404 either. */
export const PREFLIGHT_ROUTE = '/v1 (CORS preflight)';
const answered = new WeakSet<FastifyRequest>();

/** Whether the CORS hook answered this request as a preflight. */
export const isAnsweredPreflight = (req: FastifyRequest): boolean => answered.has(req);

/** /v1 and everything under it, whether served or not (its 404s are readable by the page too). */
const OPENAI_PATH = /^\/v1(?:[/?#]|$)/;

/** The Access-Control-Allow-Origin for a page's Origin, or undefined when it may not read. */
function allowedOrigin(origins: Exclude<CorsOrigins, false>, origin: string | undefined): string | undefined {
  if (origins === '*') return '*';
  return origin !== undefined && origins.includes(origin) ? origin : undefined;
}

/**
 * CORS on /v1 only, at the root, so that /v1's 404s and preflights of paths that have no
 * OPTIONS route are covered too; other paths' OPTIONS fall through to the 404/405 they always had.
 */
export function registerCors(app: FastifyInstance, origins: CorsOrigins): void {
  if (origins === false) return;
  app.addHook('onRequest', (req, reply, done) => {
    if (!OPENAI_PATH.test(req.url)) return done();
    const origin = allowedOrigin(origins, req.headers.origin);
    const preflight = req.method === 'OPTIONS';
    reply.header('vary', preflight ? 'Origin, Access-Control-Request-Headers' : 'Origin');
    if (origin !== undefined) reply.header('access-control-allow-origin', origin);
    reply.header('access-control-expose-headers', EXPOSED);
    if (!preflight) return done();
    reply.header('access-control-allow-methods', METHODS);
    const asked = req.headers['access-control-request-headers'];
    if (asked !== undefined) reply.header('access-control-allow-headers', asked);
    reply.header('access-control-max-age', MAX_AGE);
    answered.add(req);
    // Safari waits for a body on a 204 without a length.
    void reply.code(204).header('content-length', '0').send();
  });
}
