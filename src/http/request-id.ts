// Request ids: every response carries `x-request-id`, and the request's log line the same id
// (Fastify's `reqId`), so a client's report of a failure finds its line. A client (or a proxy in
// front) may send its own id, which is kept when it is short and plain; anything else (too long,
// spaces, quotes, control characters that could forge log lines or headers) is replaced by a
// fresh UUID rather than refused: the id is for correlation, never a reason to fail a request.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';

export const REQUEST_ID_HEADER = 'x-request-id';
/** What a client's own id may be: up to 128 of letters, digits and `-_.:/+=@` (UUIDs, ULIDs, W3C trace ids, base64). */
const CLIENT_ID = /^[A-Za-z0-9\-_.:/+=@]{1,128}$/;

/** Fastify's genReqId: the client's x-request-id when acceptable, else a new UUID. */
export function requestId(req: IncomingMessage): string {
  const sent = req.headers[REQUEST_ID_HEADER];
  return typeof sent === 'string' && CLIENT_ID.test(sent) ? sent : randomUUID();
}

/** Sets the header first thing, so that every answer carries it: 404s, 429s and errors too. */
export function registerRequestIds(app: FastifyInstance): void {
  app.addHook('onRequest', (req, reply, done) => {
    reply.header(REQUEST_ID_HEADER, req.id);
    done();
  });
}
