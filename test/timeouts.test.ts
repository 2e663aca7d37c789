// Slow clients: connections that dribble their headers (slowloris) are cut off after the
// headers timeout while everyone else is served as usual.
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
    app = await buildApp({ db, headersTimeoutMs: 800 });
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as net.AddressInfo).port;
  });
  afterAll(async () => {
    await app.close();
    await db.close();
  });

  it('cuts off 50 slowloris connections and keeps serving others meanwhile', async () => {
    const slow = Array.from({ length: 50 }, () => {
      const s = net.connect(port, '127.0.0.1');
      s.on('error', () => {});
      const closed = new Promise<number>((resolve) => s.on('close', () => resolve(Date.now())));
      s.on('connect', () => s.write('GET /unique_nodes?model_name=m HTTP/1.1\r\nHost: x\r\n'));
      // One more header byte every 200 ms, never the blank line.
      const timer = setInterval(() => s.writable && s.write('X'), 200);
      return { s, closed, timer };
    });
    const started = Date.now();
    const latencies: number[] = [];
    for (let i = 0; i < 20; i++) {
      const t = Date.now();
      const res = await fetch(`http://127.0.0.1:${port}/unique_nodes?model_name=m`);
      expect(res.status).toBe(200);
      latencies.push(Date.now() - t);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(Math.max(...latencies)).toBeLessThan(500);
    const closedAt = await Promise.race([Promise.all(slow.map((x) => x.closed)), new Promise<null>((r) => setTimeout(() => r(null), 5000))]);
    slow.forEach((x) => clearInterval(x.timer));
    expect(closedAt).not.toBeNull();
    expect(Math.max(...closedAt!) - started).toBeLessThan(4000);
  });
});
