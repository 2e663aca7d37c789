// Lingering close for bodies the service refuses unread (issue 29; nginx's lingering_close).
// A 413 (BODY_LIMIT) is answered as soon as the headers say the body is too large. Fastify then
// asks to close the connection ("the client may send more data"), and Node closes a socket
// whose client is still writing the body: the unread bytes make the kernel send a reset, and
// the client gets EPIPE or ECONNRESET instead of the 413 — the seed's worker takes that for an
// outage. So when a response goes out before its request's body was read, the connection is
// kept: Node reads and discards the rest of the body (its framing says where it ends), and the
// connection serves the next request. A bound keeps this from being a way to make the server
// read without end: past LINGER_BYTES after the answer, or when the body is not complete within
// the request timeout (Node's own), the socket is closed after all.
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

/** Bytes of a refused body the server reads and discards after answering before it closes the connection. */
export const LINGER_BYTES = 16 * 1024 * 1024;

export function registerLingeringClose(app: FastifyInstance, maxBytes = LINGER_BYTES): void {
  app.addHook('onSend', (req, reply, payload, done) => {
    const raw = req.raw;
    if (!raw.complete && String(reply.getHeader('connection') ?? '').toLowerCase() === 'close') {
      reply.removeHeader('connection');
      bound(raw.socket, maxBytes, () => raw.complete);
    }
    done(null, payload);
  });
}

/** Destroys `socket` once more than `maxBytes` arrive before `complete()` holds. */
function bound(socket: Socket | null, maxBytes: number, complete: () => boolean): void {
  if (!socket) return;
  let seen = 0;
  const onData = (chunk: Buffer) => {
    if (complete()) return void socket.off('data', onData);
    seen += chunk.length;
    if (seen > maxBytes) {
      socket.off('data', onData);
      socket.destroy();
    }
  };
  socket.on('data', onData);
  socket.once('close', () => socket.off('data', onData));
}
