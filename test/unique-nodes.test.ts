// GET /unique_nodes through the real app, on each storage backend: window semantics
// (inclusive bounds, mid-day bounds, open sides), normalisation and errors.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findNodeByName, recordResult } from './helpers/production-paths.js';
import { backends } from './helpers/db.js';
import { report, startApp } from './helpers/app.js';

describe.each(backends)('GET /unique_nodes on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  const get = (query: string) => t.app.inject({ method: 'GET', url: `/unique_nodes?${query}` });
  const nodesIn = async (query: string) => (await get(query)).json().nodes as string[];

  beforeAll(async () => {
    t = await startApp(backend);
    const at = async (name: string, jobId: string, when: string, status: 'success' | 'error' = 'success', modelName = 'llama3') => {
      const node = (await findNodeByName(t.db, name)) ?? { id: Number((await t.addNode(name)) && (await findNodeByName(t.db, name))!.id) };
      await recordResult(t.db, { nodeId: node.id, jobId, modelName, status, result: {}, defaultPoints: 1, receivedAt: when });
    };
    for (const name of ['zeta', 'alpha', 'Beta', 'mid', 'edge', 'errors-only']) await t.addNode(name);
    await at('alpha', 'a1', '2024-03-01T10:00:00Z');
    await at('zeta', 'z1', '2024-03-02T00:00:00Z');
    await at('Beta', 'b1', '2024-03-03T23:59:59.5Z');
    // mid: active before and after a same-day window, with one success inside it.
    await at('mid', 'm1', '2024-03-05T08:00:00Z');
    await at('mid', 'm2', '2024-03-05T12:00:00Z');
    await at('mid', 'm3', '2024-03-05T16:00:00Z');
    // edge: active before and after a same-day window, nothing inside it.
    await at('edge', 'e1', '2024-03-05T09:00:00Z');
    await at('edge', 'e2', '2024-03-05T15:00:00Z');
    await at('errors-only', 'x1', '2024-03-02T12:00:00Z', 'error');
    await at('alpha', 'other', '2024-03-02T12:00:00Z', 'success', 'mistral');
  });
  afterAll(async () => t.close());

  describe('happy', () => {
    it('lists every node with a success for the model, sorted, errors and other models excluded', async () => {
      const res = await get('model_name=llama3');
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({
        model_name: 'llama3',
        start_date: null,
        end_date: null,
        count: 6 - 1,
        nodes: ['Beta', 'alpha', 'edge', 'mid', 'zeta'],
      });
    });

    it('includes both bounds', async () => {
      expect(await nodesIn('model_name=llama3&start_date=2024-03-01T10:00:00Z&end_date=2024-03-02T00:00:00Z')).toEqual(['alpha', 'zeta']);
      expect(await nodesIn('model_name=llama3&start_date=2024-03-01T10:00:00.000001Z&end_date=2024-03-01T23:59:59Z')).toEqual([]);
    });

    it('takes a date alone as midnight UTC', async () => {
      expect(await nodesIn('model_name=llama3&start_date=2024-03-02&end_date=2024-03-02')).toEqual(['zeta']);
      expect(await nodesIn('model_name=llama3&start_date=2024-03-02&end_date=2024-03-03')).toEqual(['zeta']);
      expect(await nodesIn('model_name=llama3&start_date=2024-03-02&end_date=2024-03-04')).toEqual(['Beta', 'zeta']);
    });

    it('answers windows that start and end inside one active day exactly', async () => {
      expect(await nodesIn('model_name=llama3&start_date=2024-03-05T10:00:00&end_date=2024-03-05T14:00:00')).toEqual(['mid']);
      expect(await nodesIn('model_name=llama3&start_date=2024-03-05T12:00:00&end_date=2024-03-05T12:00:00')).toEqual(['mid']);
      expect(await nodesIn('model_name=llama3&start_date=2024-03-05T15:00:00&end_date=2024-03-05T15:30:00')).toEqual(['edge']);
      expect(await nodesIn('model_name=llama3&start_date=2024-03-05T13:00:00&end_date=2024-03-05T14:00:00')).toEqual([]);
    });

    it('handles open sides', async () => {
      expect(await nodesIn('model_name=llama3&start_date=2024-03-03')).toEqual(['Beta', 'edge', 'mid']);
      expect(await nodesIn('model_name=llama3&end_date=2024-03-02T00:00:00')).toEqual(['alpha', 'zeta']);
      expect(await nodesIn('model_name=llama3&start_date=&end_date=null')).toHaveLength(5);
    });

    it('normalises offsets to UTC and echoes the bounds', async () => {
      const res = await get(`model_name=llama3&start_date=${encodeURIComponent('2024-03-02T01:00:00+01:00')}&end_date=2024-03-02`);
      expect(res.json()).toEqual({
        model_name: 'llama3',
        start_date: '2024-03-02T00:00:00Z',
        end_date: '2024-03-02T00:00:00Z',
        count: 1,
        nodes: ['zeta'],
      });
    });

    it('answers count 0 for an unknown model or an empty window', async () => {
      expect((await get('model_name=unknown')).json()).toEqual({ model_name: 'unknown', start_date: null, end_date: null, count: 0, nodes: [] });
      expect((await get('model_name=llama3&start_date=2030-01-01')).json()).toMatchObject({ count: 0, nodes: [] });
    });

    it('sees a report made through the API at once', async () => {
      const key = await t.addNode('live');
      await t.app.inject({ method: 'POST', url: '/worker/update_result', payload: report(key, { model_name: 'fresh-model' }) });
      expect(await nodesIn('model_name=fresh-model')).toEqual(['live']);
    });
  });

  describe('errors', () => {
    it('422 when end_date is before start_date', async () => {
      const res = await get('model_name=llama3&start_date=2024-03-02&end_date=2024-03-01T23:59:59');
      expect(res.statusCode).toBe(422);
      expect(res.json().detail).toHaveLength(1);
      expect(res.json().detail[0]).toMatchObject({ loc: ['query', 'end_date'], type: 'value_error' });
    });

    it('422 for a missing model_name and bad dates, all at once', async () => {
      const res = await get('start_date=yesterday&end_date=2024-02-30');
      expect(res.statusCode).toBe(422);
      expect(res.json().detail.map((e: { loc: unknown[]; type: string }) => [e.loc, e.type])).toEqual([
        [['query', 'model_name'], 'missing'],
        [['query', 'start_date'], 'datetime_from_date_parsing'],
        [['query', 'end_date'], 'datetime_from_date_parsing'],
      ]);
    });

    it('needs no key (public), and ignores one', async () => {
      const res = await t.app.inject({ method: 'GET', url: '/unique_nodes?model_name=llama3', headers: { api_key: 'whatever' } });
      expect(res.statusCode).toBe(200);
    });
  });
});
