// Client addresses behind a reverse proxy (TRUST_PROXY), through the real app: the address is
// the right-most X-Forwarded-For entry that a trusted proxy did not write, so a client cannot
// pick its own by writing the header, and a client that connects directly is itself. Seen
// through the per-address rate limit. (test/proxy.test.ts does the same through nginx.)
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { NO_RATE_LIMITS } from '../src/config.js';
import type { Database } from '../src/db/database.js';
import { backends } from './helpers/db.js';

describe('TRUST_PROXY', () => {
  let db: Database;
  let app: Awaited<ReturnType<typeof buildApp>>;
  beforeAll(async () => {
    db = await backends[0]!.open();
    app = await buildApp({ db, rateLimits: { ...NO_RATE_LIMITS, perIp: 2 }, trustProxy: ['127.0.0.1', '10.0.0.0/8'] });
  });
  afterAll(async () => {
    await app.close();
    await db.close();
  });
  const ask = (remoteAddress: string, xff?: string) =>
    app.inject({ url: '/unique_nodes?model_name=m', remoteAddress, headers: xff ? { 'x-forwarded-for': xff } : {} });

  it('limits the client the trusted proxies saw, whatever it writes into X-Forwarded-For', async () => {
    expect((await ask('127.0.0.1', '203.0.113.7')).statusCode).toBe(200);
    // Two proxies (10.1.2.3 in front of 127.0.0.1): still the same client.
    expect((await ask('127.0.0.1', '198.51.100.1, 203.0.113.7, 10.1.2.3')).statusCode).toBe(200);
    expect((await ask('127.0.0.1', '198.51.100.2, 203.0.113.7')).statusCode).toBe(429);
    expect((await ask('127.0.0.1', '203.0.113.8')).statusCode).toBe(200);
  });

  it('takes a client that connects directly for itself, header or not', async () => {
    expect((await ask('192.0.2.50', '203.0.113.9')).statusCode).toBe(200);
    expect((await ask('192.0.2.50', '203.0.113.10')).statusCode).toBe(200);
    expect((await ask('192.0.2.50', '203.0.113.11')).statusCode).toBe(429);
    expect((await ask('127.0.0.1', '203.0.113.9')).statusCode).toBe(200);
  });
});
