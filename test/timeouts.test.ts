// Clients the HTTP server refuses before there is a request. Slow ones: connections that
// dribble their headers (slowloris) are cut off after the headers timeout while everyone else is
// served as usual. The test waits for events only (no latency bound): every slow connection is
// answered 408 and closed by the server while it is still sending, and the plain requests sent
// while they were all open are answered 200. And what Node's HTTP parser refuses — headers over
// the limit, a request line that is not HTTP — is answered with a JSON body with `detail`, like
// every other error of the service (http/errors.ts clientErrorHandler).
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import type { Database } from '../src/db/database.js';
import { backends } from './helpers/db.js';

/** Sends `raw` on a new connection and resolves to everything the server wrote before it closed. */
function exchange(port: number, raw: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => s.write(raw));
    let answer = '';
    s.on('data', (d) => (answer += d.toString()));
    s.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' || err.code === 'EPIPE' ? undefined : reject(err)));
    s.on('close', () => resolve(answer));
  });
}

describe('clients refused before a request', () => {
  let db: Database;
  let app: Awaited<ReturnType<typeof buildApp>>;
  let port: number;
  beforeAll(async () => {
    db = await backends[0]!.open();
    app = await buildApp({ db, headersTimeoutMs: 1_500 });
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    await app.close();
    await db.close();
  });

  it('cuts off 50 slowloris connections and keeps serving others meanwhile', async () => {
    const slow = await Promise.all(
      Array.from(
        { length: 50 },
        () =>
          new Promise<{ s: net.Socket; closed: Promise<string>; timer: NodeJS.Timeout }>((ready) => {
            const s = net.connect(port, '127.0.0.1');
            s.on('error', () => {});
            let answer = '';
            s.on('data', (d) => (answer += d.toString()));
            const closed = new Promise<string>((resolve) => s.on('close', () => resolve(answer)));
            // One more header byte every 200 ms, never the blank line: only the server ends this.
            const timer = setInterval(() => s.writable && s.write('X'), 200);
            s.on('connect', () => s.write('GET /unique_nodes?model_name=m HTTP/1.1\r\nHost: x\r\n', () => ready({ s, closed, timer })));
          }),
      ),
    );
    let open = slow.length;
    const cut = slow.map((x) => x.closed.then((answer) => (open--, answer)));
    // Plain requests while the slow ones hold their connections.
    const openWhileServed: number[] = [];
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`http://127.0.0.1:${port}/unique_nodes?model_name=m`);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      openWhileServed.push(open);
    }
    // The first answers came while every slow connection was still open (the server's timeout
    // is far longer than one request here, though nothing below depends on how long).
    expect(openWhileServed.some((n) => n > 0)).toBe(true);
    const answers = await Promise.all(cut);
    slow.forEach((x) => clearInterval(x.timer));
    // Each was ended by the server with its timeout answer, not by us.
    for (const a of answers) {
      expect(a).toMatch(/^HTTP\/1\.1 408 /);
      expect(JSON.parse(a.slice(a.indexOf('\r\n\r\n') + 4))).toEqual({ detail: 'Request Timeout' });
    }
  });

  it('431 with detail for headers over the limit, 400 with detail for a request line that is not HTTP', async () => {
    const big = await exchange(port, `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(big).toMatch(/^HTTP\/1\.1 431 /);
    expect(JSON.parse(big.slice(big.indexOf('\r\n\r\n') + 4))).toEqual({ detail: 'Request Header Fields Too Large' });
    const garbage = await exchange(port, 'HELLO THERE\r\n\r\n');
    expect(garbage).toMatch(/^HTTP\/1\.1 400 /);
    expect(JSON.parse(garbage.slice(garbage.indexOf('\r\n\r\n') + 4))).toEqual({ detail: 'Bad Request' });
    // The server serves on.
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
  });
});
