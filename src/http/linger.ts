// Lingering close for bodies the service refuses unread (issue 29; nginx's lingering_close).
// A 413 (BODY_LIMIT) is answered as soon as the headers say the body is too large. Fastify then
// asks to close the connection ("the client may send more data"), and Node closes a socket
// whose client is still writing the body: the unread bytes make the kernel send a reset, and
// the client gets EPIPE or ECONNRESET instead of the 413 — the seed's worker takes that for an
// outage. So when a response goes out before its request's body was read, the connection is
// kept: the rest of the body is read and discarded (its framing says where it ends), and the
// connection serves the next request. A bound keeps this from being a way to make the server
// read without end: past LINGER_BYTES after the answer, or when the body is not complete within
// the request timeout (Node's own), the socket is closed after all.
//
// The body is read from the request itself. Counting on the socket instead (a 'data' listener)
// takes the socket off Node's parser; when an async hook (the per-address rate limit) had let
// the body fill the request's buffer, the socket stayed paused there, the rest of the body was
// never read, and the connection's next request waited for the request timeout (a 408).
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';

/** Bytes of a refused body the server reads and discards after answering before it closes the connection. */
export const LINGER_BYTES = 16 * 1024 * 1024;

export function registerLingeringClose(app: FastifyInstance, maxBytes = LINGER_BYTES): void {
  app.addHook('onSend', (req, reply, payload, done) => {
    const raw = req.raw;
    if (!raw.complete && String(reply.getHeader('connection') ?? '').toLowerCase() === 'close') {
      reply.removeHeader('connection');
      discard(raw, maxBytes);
    }
    done(null, payload);
  });
}

/** Reads and discards the rest of `req`'s body; destroys its socket once more than `maxBytes` of it arrive. */
function discard(req: IncomingMessage, maxBytes: number): void {
  let seen = 0;
  req.on('data', (chunk: Buffer) => {
    seen += chunk.length;
    if (seen > maxBytes) req.socket.destroy();
  });
  req.resume();
}
