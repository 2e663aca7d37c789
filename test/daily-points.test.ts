// POST /daily_points through the real app, on each storage backend.
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setNodeDisabled } from '../src/nodes/lifecycle.js';
import { revokeApiKey } from '../src/nodes/lifecycle.js';
import { findNodeByName, recordResult } from './helpers/production-paths.js';
import { backends } from './helpers/db.js';
import { report, startApp, todayUtc } from './helpers/app.js';

const daysAgo = (n: number): string => new Date(Date.now() - n * 86_400_000).toISOString().slice(0, 10);

describe.each(backends)('POST /daily_points on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let alpha: string;
  let beta: string;
  let reader: string;
  const ask = (payload: unknown, key?: string) =>
    t.app.inject({ method: 'POST', url: '/daily_points', payload: payload as object, headers: key === undefined ? {} : { api_key: key } });

  beforeAll(async () => {
    t = await startApp(backend);
    alpha = await t.addNode('alpha');
    beta = await t.addNode('beta');
    reader = await t.addReader('grafana');
    const node = (await findNodeByName(t.db, 'alpha'))!;
    // History on earlier days goes straight through the repository (the API always uses the
    // server clock), including both sides of a UTC midnight.
    const at = (day: string, time: string) => `${day}T${time}Z`;
    const past = [
      [daysAgo(2), '23:59:59.999'],
      [daysAgo(1), '00:00:00'],
      [daysAgo(1), '12:00:00'],
      [daysAgo(5), '08:00:00'],
    ] as const;
    for (const [i, [day, time]] of past.entries()) {
      await recordResult(t.db, {
        nodeId: node.id,
        jobId: `hist-${i}`,
        modelName: 'm',
        status: 'success',
        result: {},
        defaultPoints: 1,
        receivedAt: at(day, time),
      });
    }
    await recordResult(t.db, {
      nodeId: node.id,
      jobId: 'hist-err',
      modelName: 'm',
      status: 'error',
      result: {},
      defaultPoints: 1,
      receivedAt: at(daysAgo(3), '10:00:00'),
    });
    // Today, through the API.
    for (let i = 0; i < 3; i++) await t.app.inject({ method: 'POST', url: '/worker/update_result', payload: report(alpha) });
  });
  afterAll(async () => t.close());

  describe('happy', () => {
    it("gives the node's own key exactly last_days days, oldest first, ending today (UTC), zeros included", async () => {
      const res = await ask({ node_name: 'alpha', last_days: 7 }, alpha);
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual([
        { date: daysAgo(6), points: 0 },
        { date: daysAgo(5), points: 1 },
        { date: daysAgo(4), points: 0 },
        { date: daysAgo(3), points: 0 },
        { date: daysAgo(2), points: 1 },
        { date: daysAgo(1), points: 2 },
        { date: todayUtc(), points: 3 },
      ]);
    });

    it('serves any node to a reader key', async () => {
      const res = await ask({ node_name: 'beta', last_days: 2 }, reader);
      expect(res.json()).toEqual([
        { date: daysAgo(1), points: 0 },
        { date: todayUtc(), points: 0 },
      ]);
    });

    it('accepts last_days as "7" and 7.0 (pydantic lax integers), and 1 and 366', async () => {
      expect((await ask({ node_name: 'alpha', last_days: '7' }, alpha)).json()).toHaveLength(7);
      expect((await ask({ node_name: 'alpha', last_days: 7.0 }, alpha)).json()).toHaveLength(7);
      expect((await ask({ node_name: 'alpha', last_days: 1 }, alpha)).json()).toEqual([{ date: todayUtc(), points: 3 }]);
      const year = (await ask({ node_name: 'alpha', last_days: 366 }, alpha)).json();
      expect(year).toHaveLength(366);
      expect(year[365].date).toBe(todayUtc());
    });
  });

  describe('errors', () => {
    it('422 for a bad body once the key is valid', async () => {
      const res = await ask({ node_name: '', last_days: 'abc' }, alpha);
      expect(res.statusCode).toBe(422);
      expect(res.json().detail.map((e: { type: string }) => e.type)).toEqual(['string_too_short', 'int_parsing']);
      expect((await ask({ node_name: 'alpha', last_days: 2.5 }, alpha)).json().detail[0].type).toBe('int_from_float');
      expect((await ask({ node_name: 'alpha', last_days: 0 }, alpha)).json().detail[0].type).toBe('greater_than_equal');
      expect((await ask({ node_name: 'alpha', last_days: 367 }, alpha)).json().detail[0].type).toBe('less_than_equal');
    });

    it('404 for an unknown node asked with a reader key', async () => {
      const res = await ask({ node_name: 'nobody', last_days: 3 }, reader);
      expect(res.statusCode).toBe(404);
      expect(res.json()).toEqual({ detail: 'Node not found' });
    });
  });

  describe('security', () => {
    it('401 Not authenticated without the header (before looking at the body)', async () => {
      for (const payload of [{ node_name: 'alpha', last_days: 3 }, { bad: true }]) {
        const res = await ask(payload);
        expect(res.statusCode).toBe(401);
        expect(res.json()).toEqual({ detail: 'Not authenticated' });
      }
      expect((await ask({ node_name: 'alpha', last_days: 3 }, '')).json()).toEqual({ detail: 'Not authenticated' });
    });

    it('401 Invalid API key for an unknown key', async () => {
      const res = await ask({ node_name: 'alpha', last_days: 3 }, 'nk_unknown');
      expect(res.statusCode).toBe(401);
      expect(res.json()).toEqual({ detail: 'Invalid API key' });
    });

    it('403 for a node key asking about another node, existing or not', async () => {
      expect((await ask({ node_name: 'alpha', last_days: 3 }, beta)).statusCode).toBe(403);
      expect((await ask({ node_name: 'nobody', last_days: 3 }, beta)).statusCode).toBe(403);
    });

    it("403 for a disabled node's key; readers still see its history", async () => {
      const key = await t.addNode('gamma');
      await setNodeDisabled(t.db, 'gamma', true);
      expect((await ask({ node_name: 'gamma', last_days: 3 }, key)).statusCode).toBe(403);
      expect((await ask({ node_name: 'gamma', last_days: 3 }, reader)).statusCode).toBe(200);
    });

    it('401 for a revoked reader key', async () => {
      const key = await t.addReader('old-dashboard');
      expect((await ask({ node_name: 'alpha', last_days: 1 }, key)).statusCode).toBe(200);
      await revokeApiKey(t.db, 'old-dashboard');
      expect((await ask({ node_name: 'alpha', last_days: 1 }, key)).statusCode).toBe(401);
    });

    it('reads the first of repeated api_key headers, as Starlette does for FastAPI', async () => {
      const url = await t.app.listen({ port: 0, host: '127.0.0.1' }); // closed with the app
      const send = (keys: string[]) =>
        new Promise<number>((resolve, reject) => {
          const req = request(`${url}/daily_points`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
            res.resume();
            resolve(res.statusCode!);
          });
          req.setHeader('api_key', keys); // two header lines, which Node's server joins into "a, b"
          req.on('error', reject);
          req.end(JSON.stringify({ node_name: 'alpha', last_days: 1 }));
        });
      expect(await send([alpha, 'nk_bogus'])).toBe(200);
      expect(await send(['nk_bogus', alpha])).toBe(401);
    });

    it('does not read the key from the body or the query', async () => {
      const res = await t.app.inject({
        method: 'POST',
        url: `/daily_points?api_key=${alpha}`,
        payload: { node_name: 'alpha', last_days: 1, api_key: alpha },
      });
      expect(res.statusCode).toBe(401);
    });
  });
});
