// The authentication step both keyed endpoints share: an address that used up its failed
// attempts is refused first (429), then the key is resolved (cache or database), and a
// failure is counted against the address before the 401.
import type { FastifyRequest } from 'fastify';
import { authenticate, type Principal } from '../auth/authenticate.js';
import { HttpError } from '../http/http-error.js';
import { tooMany } from '../http/rate-limit.js';
import type { Deps } from './types.js';

export async function authenticateRequest({ db, principals, limiters, metrics }: Deps, req: FastifyRequest, key: string): Promise<Principal> {
  const blocked = limiters.failures.blockedFor(req.ip);
  if (blocked > 0) throw tooMany(blocked);
  const principal = await authenticate(db, key, principals, (source) => metrics.keyLookups.inc({ source }));
  if (!principal) {
    limiters.failures.fail(req.ip);
    throw new HttpError(401, 'Invalid API key');
  }
  return principal;
}
