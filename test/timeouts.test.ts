// Slow clients: connections that dribble their headers (slowloris) are cut off after the
// headers timeout while everyone else is served as usual. The test waits for events only (no
// latency bound): every slow connection is answered 408 and closed by the server while it is
// still sending, and the plain requests sent while they were all open are answered 200.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import type { Database } from '../src/db/database.js';
import { backends } from './helpers/db.js';

describe('slow clients', () => {
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
    const slow = await Promise.all(Array.from({ length: 50 }, () => new Promise<{ s: net.Socket; closed: Promise<string>; timer: NodeJS.Timeout }>((ready) => {
      const s = net.connect(port, '127.0.0.1');
      s.on('error', () => {});
      let answer = '';
      s.on('data', (d) => (answer += d.toString()));
      const closed = new Promise<string>((resolve) => s.on('close', () => resolve(answer)));
      // One more header byte every 200 ms, never the blank line: only the server ends this.
      const timer = setInterval(() => s.writable && s.write('X'), 200);
      s.on('connect', () => s.write('GET /unique_nodes?model_name=m HTTP/1.1\r\nHost: x\r\n', () => ready({ s, closed, timer })));
    })));
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
    for (const a of answers) expect(a).toMatch(/^HTTP\/1\.1 408 /);
  });
});
