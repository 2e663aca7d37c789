// Rate limits through the real app: per client address, per key, and failed authentications,
// each answering 429 with Retry-After and a detail; probes are never limited; the defaults
// leave a busy but well-behaved worker alone.
import { afterEach, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { DEFAULT_RATE_LIMITS, loadConfig, NO_RATE_LIMITS, type RateLimits } from '../src/config.js';
import type { Database } from '../src/db/database.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { addApiKey } from '../src/nodes/api-keys.js';
import { backends } from './helpers/db.js';
import { report } from './helpers/app.js';
import { resetDuration } from '../src/http/rate-limit.js';

let db: Database | undefined;
let app: Awaited<ReturnType<typeof buildApp>> | undefined;
afterEach(async () => {
  await app?.close();
  await db?.close();
  app = undefined;
  db = undefined;
});

async function start(limits: Partial<RateLimits>) {
  db = await backends[0]!.open();
  app = await buildApp({ db, rateLimits: { ...NO_RATE_LIMITS, ...limits } });
  return { app, db };
}

const expect429 = (res: { statusCode: number; headers: Record<string, unknown>; json: () => { detail: unknown } }) => {
  expect(res.statusCode).toBe(429);
  expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
  expect(res.json().detail).toMatch(/retry in \d+ s/);
};

describe('rate limits', () => {
  it('limit each client address, never the probes', async () => {
    const { app } = await start({ perIp: 5 });
    for (let i = 0; i < 5; i++) expect((await app.inject({ url: '/unique_nodes?model_name=m' })).statusCode).toBe(200);
    expect429(await app.inject({ url: '/unique_nodes?model_name=m' }));
    expect429(await app.inject({ method: 'POST', url: '/worker/update_result', payload: {} }));
    expect((await app.inject({ url: '/unique_nodes?model_name=m', remoteAddress: '10.0.0.2' })).statusCode).toBe(200);
    for (const url of ['/healthz', '/readyz', '/metrics']) expect((await app.inject({ url })).statusCode).toBe(200);
  });

  it('limit reports per key, leaving other keys alone', async () => {
    const { app, db } = await start({ reportsPerKey: 3 });
    const a = (await createNode(db, 'a')).key;
    const b = (await createNode(db, 'b')).key;
    for (let i = 0; i < 3; i++) expect((await app.inject({ method: 'POST', url: '/worker/update_result', payload: report(a) })).statusCode).toBe(200);
    const limited = await app.inject({ method: 'POST', url: '/worker/update_result', payload: report(a) });
    expect429(limited);
    expect((await app.inject({ method: 'POST', url: '/worker/update_result', payload: report(b) })).statusCode).toBe(200);
  });

  it('limit daily_points per key', async () => {
    const { app, db } = await start({ readsPerKey: 2 });
    const reader = (await addApiKey(db, 'reader', 'r')).key;
    await createNode(db, 'n');
    const ask = () => app.inject({ method: 'POST', url: '/daily_points', headers: { api_key: reader }, payload: { node_name: 'n', last_days: 1 } });
    expect((await ask()).statusCode).toBe(200);
    expect((await ask()).statusCode).toBe(200);
    expect429(await ask());
  });

  it('answer an address that keeps failing authentication 429 for its failures, and still serve its valid keys and proofs', async () => {
    const { app, db } = await start({ authFailuresPerIp: 3 });
    const good = (await createNode(db, 'good')).key;
    const other = (await createNode(db, 'other')).key;
    for (let i = 0; i < 3; i++) {
      expect((await app.inject({ method: 'POST', url: '/worker/update_result', payload: report(`nk_guess${i}`) })).statusCode).toBe(401);
    }
    // Past the budget, each failure is 429: a stale token's worker, a guess, a wrong secret.
    expect429(await app.inject({ method: 'POST', url: '/worker/update_result', payload: report('nk_guess') }));
    expect429(await app.inject({ url: '/worker/get_job?node_version=x', headers: { authorization: 'Bearer ns_stale' } }));
    expect429(await app.inject({ method: 'POST', url: '/check_node_secret', payload: { node_id: 'other', secret: 'nk_wrong' } }));
    expect429(await app.inject({ method: 'POST', url: '/worker/register_node', payload: { node_url: 'other', node_version: 'x', stats: {} } }));
    // The honest nodes behind the same address (a host with several, a NAT) are served: the seed's
    // worker stops for hours on a 429 from update_result, register_node or update_models.
    expect((await app.inject({ method: 'POST', url: '/worker/update_result', payload: report(good) })).statusCode).toBe(200);
    expect(
      (await app.inject({ method: 'POST', url: '/daily_points', headers: { api_key: good }, payload: { node_name: 'good', last_days: 1 } }))
        .statusCode,
    ).toBe(200);
    expect((await app.inject({ method: 'POST', url: '/check_node_secret', payload: { node_id: 'other', secret: other } })).statusCode).toBe(200);
    const registered = await app.inject({
      method: 'POST',
      url: '/worker/register_node',
      payload: { node_url: 'other', node_version: 'x', stats: {} },
    });
    expect(registered.statusCode).toBe(200);
    const token = registered.json<{ access_token: string }>().access_token;
    expect(
      (
        await app.inject({
          method: 'POST',
          url: '/worker/update_models',
          headers: { authorization: `Bearer ${token}` },
          payload: { node_url: 'other', models: ['m'] },
        })
      ).statusCode,
    ).toBe(200);
    expect((await app.inject({ url: '/worker/get_job?node_version=x', headers: { authorization: `Bearer ${token}` } })).statusCode).toBe(200);
    // Another address has its own budget.
    expect(
      (await app.inject({ method: 'POST', url: '/worker/update_result', payload: report('nk_guess'), remoteAddress: '10.0.0.9' })).statusCode,
    ).toBe(401);
  });

  it('with the defaults, never throttle a worker that reports far more often than every few seconds', async () => {
    db = await backends[0]!.open();
    app = await buildApp({ db, rateLimits: DEFAULT_RATE_LIMITS });
    const key = (await createNode(db, 'busy')).key;
    for (let i = 0; i < 120; i++) {
      const res = await app.inject({ method: 'POST', url: '/worker/update_result', payload: report(key) });
      expect(res.statusCode).toBe(200);
    }
  });

  it("name OpenAI's headers, all three from one limiter: the one with the fewest calls left", async () => {
    const { app, db } = await start({ perIp: 10, completionsPerUser: 3, reportsPerKey: 50 });
    const user = (await addApiKey(db, 'user', 'u')).key;
    const node = (await createNode(db, 'n')).key;
    const limitOf = (res: { headers: Record<string, unknown> }) => {
      for (const old of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']) expect(res.headers[old]).toBeUndefined();
      return [res.headers['x-ratelimit-limit-requests'], res.headers['x-ratelimit-remaining-requests'], res.headers['x-ratelimit-reset-requests']];
    };
    // Only the per-address limiter applies.
    expect(limitOf(await app.inject({ url: '/v1/models' }))).toEqual(['10', '9', expect.stringMatching(/^(\d+s|1m0s)$/)]);
    // The per-key completions limiter has fewer left than the per-address one: its numbers, not a mix.
    const complete = () =>
      app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { authorization: `Bearer ${user}` },
        payload: { model: 'none', messages: [{ role: 'user', content: 'hi' }] },
      });
    expect(limitOf(await complete())).toEqual(['3', '2', expect.any(String)]);
    expect(limitOf(await complete())).toEqual(['3', '1', expect.any(String)]);
    expect(limitOf(await complete())).toEqual(['3', '0', expect.any(String)]);
    const refused = await complete();
    expect(refused.statusCode).toBe(429);
    expect(refused.json().error.code).toBe('rate_limit_exceeded');
    expect(limitOf(refused)).toEqual(['3', '0', expect.any(String)]);
    // Reports: 50 per key, but the address has fewer left (10 - 5 used): the address's numbers.
    expect(limitOf(await app.inject({ method: 'POST', url: '/worker/update_result', payload: report(node) }))).toEqual([
      '10',
      '4',
      expect.any(String),
    ]);
    // Probes are not limited and say nothing.
    expect(limitOf(await app.inject({ url: '/healthz' }))).toEqual([undefined, undefined, undefined]);
  });

  it('write the reset as OpenAI does', () => {
    expect([resetDuration(250), resetDuration(1000), resetDuration(12_300), resetDuration(60_000), resetDuration(61_000)]).toEqual([
      '250ms',
      '1s',
      '13s',
      '1m0s',
      '1m1s',
    ]);
  });

  it('are configured from the environment', () => {
    expect(loadConfig({}).rateLimits).toEqual(DEFAULT_RATE_LIMITS);
    expect(loadConfig({ RATE_LIMIT_PER_IP: '0', RATE_LIMIT_AUTH_FAILURES_PER_IP: '5' }).rateLimits).toEqual({
      ...DEFAULT_RATE_LIMITS,
      perIp: 0,
      authFailuresPerIp: 5,
    });
    expect(() => loadConfig({ RATE_LIMIT_REPORTS_PER_KEY: 'many' })).toThrow(/RATE_LIMIT_REPORTS_PER_KEY/);
  });
});
