// The principal cache may serve a key only while invalidation works: a change made in this
// process is seen at once, a change announced by another process (NOTIFY) within moments,
// and without a live LISTEN connection nothing is cached.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrincipalCache } from '../src/auth/authenticate.js';
import { sql } from '../src/db/database.js';
import { rotateNodeKey, setNodeDisabled } from '../src/nodes/lifecycle.js';
import { revokeApiKey } from '../src/nodes/lifecycle.js';
import { backends } from './helpers/db.js';
import { report, startApp } from './helpers/app.js';
import { sleep, until } from './helpers/wait.js';

describe.each(backends)('key cache on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  const post = (payload: object) => t.app.inject({ method: 'POST', url: '/worker/update_result', payload });
  const points = (key: string, node: string) =>
    t.app.inject({ method: 'POST', url: '/daily_points', headers: { api_key: key }, payload: { node_name: node, last_days: 1 } });

  beforeAll(async () => {
    t = await startApp(backend);
  });
  afterAll(async () => t.close());

  it('refuses a cached key at once after disable, rotate or revoke', async () => {
    const key = await t.addNode('cached-1');
    expect((await post(report(key))).statusCode).toBe(200);
    await setNodeDisabled(t.db, 'cached-1', true);
    expect((await post(report(key))).statusCode).toBe(403);
    await setNodeDisabled(t.db, 'cached-1', false);
    expect((await post(report(key))).statusCode).toBe(200);
    const fresh = await rotateNodeKey(t.db, 'cached-1');
    expect((await post(report(key))).statusCode).toBe(401);
    expect((await post(report(fresh!.key))).statusCode).toBe(200);

    const reader = await t.addReader('cached-reader');
    expect((await points(reader, 'cached-1')).statusCode).toBe(200);
    await revokeApiKey(t.db, 'cached-reader');
    expect((await points(reader, 'cached-1')).statusCode).toBe(401);
  });

  it('hears about changes made elsewhere through NOTIFY', async () => {
    const key = await t.addNode('cached-2');
    expect((await post(report(key))).statusCode).toBe(200);
    // As another process would: the change and the announcement, nothing local.
    await t.db.query(sql('t_disable_raw', `UPDATE nodes SET disabled_at = now() WHERE name = 'cached-2'`));
    await t.db.query(sql('t_notify_raw', `SELECT pg_notify('ins_keys', '')`));
    // Within moments: a second.
    await until('the key to be refused (403)', async () => (await post(report(key))).statusCode === 403, 1_000);
  });

  it('does cache: a change nobody announces is not seen until invalidation', async () => {
    const key = await t.addNode('cached-3');
    expect((await post(report(key))).statusCode).toBe(200);
    await t.db.query(sql('t_disable_silent', `UPDATE nodes SET disabled_at = now() WHERE name = 'cached-3'`));
    expect((await post(report(key))).statusCode).toBe(200);
    await t.db.query(sql('t_notify_raw', `SELECT pg_notify('ins_keys', '')`));
    await expect.poll(async () => (await post(report(key))).statusCode).toBe(403);
  });
});

describe('PrincipalCache', () => {
  const principal = { kind: 'reader' as const, readerKeyId: 1 };

  it('caches nothing while its notification channel is not live', () => {
    const c = new PrincipalCache();
    c.set('h', principal, c.begin());
    expect(c.get('h')).toBeUndefined();
    c.setLive(true);
    c.set('h', principal, c.begin());
    expect(c.get('h')).toEqual(principal);
    c.setLive(false);
    expect(c.get('h')).toBeUndefined();
  });

  it('drops an answer looked up before an invalidation', () => {
    const c = new PrincipalCache();
    c.setLive(true);
    const generation = c.begin();
    c.invalidate();
    c.set('h', principal, generation);
    expect(c.get('h')).toBeUndefined();
  });

  it('forgets entries after the TTL and bounds its size', async () => {
    const c = new PrincipalCache(20, 2);
    c.setLive(true);
    for (const h of ['a', 'b', 'c']) c.set(h, principal, c.begin());
    expect(c.get('a')).toBeUndefined();
    expect(c.get('c')).toEqual(principal);
    await sleep(30); // past the 20 ms TTL
    expect(c.get('c')).toBeUndefined();
  });
});
