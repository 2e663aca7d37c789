// Where a request's key travels, read the one way authentication and the per-key limits both
// use: the `api_key` header first, else `Authorization: Bearer`. A limit keyed on anything else
// (another header, the raw Authorization) could be sidestepped by a client that varies what
// authentication does not read.
import type { FastifyRequest } from 'fastify';

const last = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[v.length - 1] : v);

/** The bearer token of the Authorization header, if any. */
export function bearerToken(req: FastifyRequest): string | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
  return m?.[1];
}

/** The key in the `api_key` header (the last one, if repeated). */
export function headerKey(req: FastifyRequest): string | undefined {
  return last(req.headers.api_key);
}

/** The key in the `api_key` header, else the bearer token. */
export function requestKey(req: FastifyRequest): string | undefined {
  return headerKey(req) || bearerToken(req);
}
