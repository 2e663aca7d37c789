// Where a request's key travels, read the one way authentication and the per-key limits both
// use: the `api_key` header first, else Anthropic's `x-api-key` (its SDKs and Claude Code send the
// key there), else `Authorization: Bearer`. A limit keyed on anything else
// (another header, the raw Authorization) could be sidestepped by a client that varies what
// authentication does not read.
import type { FastifyRequest } from 'fastify';

/** The bearer token of the Authorization header, if any. */
export function bearerToken(req: FastifyRequest): string | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
  return m?.[1];
}

/**
 * The key in the `api_key` header: the first one, if repeated, as Starlette's `headers.get` reads
 * it for FastAPI (Node joins repeats of such a header into one value, "a, b").
 */
export function headerKey(req: FastifyRequest): string | undefined {
  const v = req.headers.api_key;
  // Only a joined value has a ", " (no key has one): headersDistinct copies every header, so it
  // is not read for the one-key requests that are nearly all of them.
  if (typeof v === 'string' && v.includes(', ')) return req.raw.headersDistinct?.api_key?.[0] ?? v;
  return Array.isArray(v) ? v[0] : v;
}

/** The key in the `api_key` header, else in `x-api-key`, else the bearer token. */
export function requestKey(req: FastifyRequest): string | undefined {
  const anthropic = req.headers['x-api-key'];
  return headerKey(req) || (typeof anthropic === 'string' ? anthropic : undefined) || bearerToken(req);
}
