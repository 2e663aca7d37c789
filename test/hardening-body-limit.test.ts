// A body over BODY_LIMIT gets its 413, never a connection reset (issue 29): the service answers
// at once and then reads and discards the rest of the body (up to a bound), as nginx's lingering
// close does, rather than closing a socket the client is still writing to (the seed's worker
// treats a reset as an outage). A raw socket client, as Python's `requests` sends: headers, the
// whole body, then it reads the answer.
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { report, startApp } from './helpers/app.js';
import { LINGER_BYTES } from '../src/http/linger.js';
import { DEFAULT_RATE_LIMITS } from '../src/config.js';

const MiB = 1024 * 1024;

/** One HTTP/1.1 request on `socket`; resolves with the status, headers and body of its answer. */
function exchange(socket: Socket, head: string, body: Buffer | string): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const [statusLine, ...lines] = buf.subarray(0, end).toString('latin1').split('\r\n');
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
      const length = Number(headers['content-length']);
      if (buf.length < end + 4 + length) return;
      socket.off('data', onData);
      socket.off('error', reject);
      resolve({ status: Number(statusLine!.split(' ')[1]), headers, body: buf.subarray(end + 4, end + 4 + length).toString('utf8') });
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.write(head);
    socket.write(body);
  });
}

const open = (url: string): Promise<Socket> =>
  new Promise((resolve, reject) => {
    const { hostname, port } = new URL(url);
    const s = connect(Number(port), hostname, () => resolve(s));
    s.once('error', reject);
  });

describe.each(backends)('a body over the limit on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let url: string;
  let key: string;
  beforeAll(async () => {
    // With the rate limits a served app has: the per-address limit is an async hook, while which
    // the body fills the request's buffer (linger.ts: that once left the connection stuck).
    t = await startApp(backend, { rateLimits: DEFAULT_RATE_LIMITS });
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    key = await t.addNode('big-reporter');
  });
  afterAll(async () => t.close());

  /** The request's head for `body` (or a body of that many bytes; 'chunked': no length). */
  const post = (body: string | number | 'chunked') =>
    `POST /worker/update_result HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n${body === 'chunked' ? 'transfer-encoding: chunked' : `content-length: ${typeof body === 'number' ? body : Buffer.byteLength(body)}`}\r\n\r\n`;

  it('answers 413 to a 2 MiB report with a valid key, after a run of other requests, every time; the connection stays usable', async () => {
    for (let run = 0; run < 4; run++) {
      const socket = await open(url);
      try {
        for (let i = 0; i < 5; i++) {
          const ok = JSON.stringify(report(key));
          expect((await exchange(socket, post(ok), ok)).status).toBe(200);
        }
        const big = JSON.stringify(report(key, { result: { message: 'x'.repeat(2 * MiB) } }));
        const res = await exchange(socket, post(big), big);
        expect(res.status).toBe(413);
        expect(JSON.parse(res.body)).toEqual({ detail: 'Request body is too large' });
        // The rest of the body was read, not left to reset the connection: the next request on
        // the same connection is answered.
        const after = JSON.stringify(report(key));
        expect((await exchange(socket, post(after), after)).status).toBe(200);
      } finally {
        socket.destroy();
      }
    }
  });

  it('reads no more than LINGER_BYTES of a refused body: past them the connection is closed', async () => {
    const socket = await open(url);
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.on('error', () => undefined);
    // The answer comes before the body: the headers already say it is too large.
    const res = await exchange(socket, post(1024 * MiB), '');
    expect(res.status).toBe(413);
    let sent = 0;
    const chunk = Buffer.alloc(MiB, 0x61);
    let open_ = true;
    void closed.then(() => {
      open_ = false;
    });
    while (open_ && sent < 4 * LINGER_BYTES) {
      sent += chunk.length;
      if (!socket.write(chunk))
        await new Promise<void>((resolve) => {
          socket.once('drain', resolve);
          void closed.then(resolve);
        });
    }
    await closed;
    expect(sent).toBeLessThan(4 * LINGER_BYTES);
  });

  it('answers 413 to a chunked body that grows past the limit', async () => {
    const socket = await open(url);
    try {
      const big = JSON.stringify(report(key, { result: { message: 'y'.repeat(2 * MiB) } }));
      const chunks = [];
      for (let i = 0; i < big.length; i += 64 * 1024) {
        const piece = big.slice(i, i + 64 * 1024);
        chunks.push(`${Buffer.byteLength(piece).toString(16)}\r\n${piece}\r\n`);
      }
      chunks.push('0\r\n\r\n');
      const res = await exchange(socket, post('chunked'), chunks.join(''));
      expect(res.status).toBe(413);
    } finally {
      socket.destroy();
    }
  });
});
