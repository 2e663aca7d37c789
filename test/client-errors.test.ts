// What Node's HTTP parser refuses before there is a request — headers over the limit, a request
// line that is not HTTP — is answered on the socket with Fastify's status and a JSON body with
// `detail`, like every other error of the service (http/errors.ts clientErrorHandler).
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

describe('requests the HTTP parser refuses', () => {
  let db: Database;
  let app: Awaited<ReturnType<typeof buildApp>>;
  let port: number;
  beforeAll(async () => {
    db = await backends[0]!.open();
    app = await buildApp({ db });
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    await app.close();
    await db.close();
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
