// The authentication steps the keyed endpoints share: the key is resolved (cache or database),
// and a failure is counted against the address before the 401 — or is 429 once the address
// used up its failed attempts (http/rate-limit.ts FailureLimiter). Where a key travels: the body's
// api_key (update_result), the `api_key` header, or `Authorization: Bearer` (workers' session
// tokens, OpenAI clients' user keys).
import type { FastifyRequest } from 'fastify';
import { authenticate, type Principal } from '../auth/authenticate.js';
import type { SessionRow } from '../auth/principal.js';
import { HttpError } from '../http/http-error.js';
import { bearerToken, requestKey } from '../http/credentials.js';
import type { Deps } from './types.js';

export { bearerToken, requestKey };

/** A suspended node's key or session asking to serve or report (src/verify/standing.ts). */
export const SUSPENDED_DETAIL =
  "Node is suspended: its answers failed verification (GET /network/nodes/NAME with the node's key shows its standing and strikes counting; the network's operator sees the evidence with: ins node audit NAME)";

export async function authenticateRequest(
  { service: { db, principals, options }, limiters, metrics }: Deps,
  req: FastifyRequest,
  key: string,
): Promise<Principal> {
  const principal = await authenticate(db, key, {
    cache: principals,
    onLookup: (source) => metrics.keyLookups.inc({ source }),
    modelsTtlSeconds: options.coordinator.modelsTtl,
  });
  if (!principal) return limiters.failures.refuse(req.ip, new HttpError(401, 'Invalid API key'));
  return principal;
}

/** The worker session of the request's bearer token (401 without a valid one). */
export async function authenticateSession(deps: Deps, req: FastifyRequest): Promise<SessionRow> {
  const token = bearerToken(req);
  if (!token) throw new HttpError(401, 'Not authenticated', { 'www-authenticate': 'Bearer' });
  const principal = await authenticateRequest(deps, req, token);
  if (principal.kind !== 'session') throw new HttpError(401, 'Invalid session token: register the node first', { 'www-authenticate': 'Bearer' });
  req.nodeName = principal.session.node.name;
  deps.service.coordinator.seen(principal.session.id);
  return principal.session;
}

/** Whoever the request's key (requestKey: `api_key`, `x-api-key` or Bearer) belongs to; 401 without a valid one. */
export async function authenticateKey(deps: Deps, req: FastifyRequest): Promise<Principal> {
  const key = requestKey(req);
  if (!key) throw new HttpError(401, 'Not authenticated');
  return authenticateRequest(deps, req, key);
}

/** The user key's id (401 without a valid key, 403 for another kind of key). */
export async function authenticateUser(deps: Deps, req: FastifyRequest): Promise<number> {
  const principal = await authenticateKey(deps, req);
  if (principal.kind !== 'user') throw new HttpError(403, 'This endpoint takes a user key (uk_…; ins key add-user LABEL)');
  return principal.userKeyId;
}

/**
 * Whether this caller may read node `nodeName`'s data: the node's own key or session token, or
 * a reader key. Another node, a disabled one, or another kind of key (a user key): 403, the
 * same whether `nodeName` exists or not (no probing for names).
 */
export function checkNodeRead(req: FastifyRequest, principal: Principal, nodeName: string): void {
  const own = principal.kind === 'session' ? principal.session.node : principal.kind === 'node' ? principal.node : undefined;
  if (own) {
    req.nodeName = own.name;
    if (own.disabled) throw new HttpError(403, 'Node is disabled');
    if (own.name !== nodeName) throw new HttpError(403, "This key may only read its own node's data");
  } else if (principal.kind !== 'reader') {
    throw new HttpError(403, "This key cannot read nodes' data");
  }
}

/** A read of one node's data with the key of the `api_key` header or Bearer (checkNodeRead). */
export async function authorizeNodeRead(deps: Deps, req: FastifyRequest, nodeName: string): Promise<void> {
  checkNodeRead(req, await authenticateKey(deps, req), nodeName);
}
