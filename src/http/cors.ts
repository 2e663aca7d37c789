// CORS for the OpenAI-compatible API (docs/openai.md, "Browsers"), with @fastify/cors: browser
// apps call /v1 with the user key in a Bearer header, never with cookies, so allowing an origin
// lends it no ambient credentials; CORS_ORIGINS only says which pages' scripts may read the
// answers. The rest of the service (worker wire, dashboard, admin) sends no CORS headers; the
// seed's unprefixed aliases (/chat/completions, /models) neither: browsers use /v1.
import cors, { type FastifyCorsOptions } from '@fastify/cors';
import type { FastifyInstance } from 'fastify';
import { REQUEST_ID_HEADER } from './request-id.js';
import type { CorsOrigins } from '../config.js';


/** Headers a page's script may read besides the simple ones: the ids and the rate limits. */
const EXPOSED = [REQUEST_ID_HEADER, 'retry-after', 'x-ratelimit-limit-requests', 'x-ratelimit-remaining-requests', 'x-ratelimit-reset-requests'];

function options(origins: Exclude<CorsOrigins, false>): FastifyCorsOptions {
  return {
    origin: origins,
    methods: ['GET', 'POST'],
    // The request's own headers are allowed back (allowedHeaders unset): the SDKs send their
    // x-stainless-* headers, and nothing in a header grants more than the key does.
    exposedHeaders: EXPOSED,
    credentials: false,
    maxAge: 600,
    // An OPTIONS without Origin (a probe, curl) gets the same 204, not a text/plain 400.
    strictPreflight: false,
  };
}

/** /v1 and everything under it, whether served or not (its 404s are readable by the page too). */
const OPENAI_PATH = /^\/v1(?:[/?#]|$)/;

/**
 * CORS on /v1 only, one registration at the root: the plugin's preflight route (OPTIONS *)
 * answers /v1 paths; for others the options say "no CORS" (origin false), so their OPTIONS
 * fall through to the 404/405 they always had, and no CORS header is added.
 */
export async function registerCors(app: FastifyInstance, origins: CorsOrigins): Promise<void> {
  if (origins === false) return;
  const on = options(origins);
  const off: FastifyCorsOptions = { origin: false };
  await app.register(cors, { delegator: (req, cb) => cb(null, OPENAI_PATH.test(req.url ?? '') ? on : off) });
}
