// Statements shared by concurrent requests (db/batcher.ts): the batcher itself, and on each
// backend the two batched paths — new job results and daily points — giving each caller the
// answer it would have had alone, with fewer statements than callers.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Batcher } from '../src/db/batcher.js';
import type { Database } from '../src/db/database.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { PointsLoader } from '../src/repositories/points.js';
import { ResultRecorder, type Report } from '../src/results/recorder.js';
import { dailyPoints, findNodeByName, recordResult } from './helpers/production-paths.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { backends, beforeEachQuery } from './helpers/db.js';
import { sleep, tick } from './helpers/wait.js';

function deferred<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe('Batcher', () => {
  it('sends a lone call at once, by itself', async () => {
    const batches: number[][] = [];
    const b = new Batcher(async (xs: number[]) => (batches.push(xs), xs.map((x) => x * 2)), { maxBatch: 10, maxInFlight: 1 });
    expect(await b.load(21)).toBe(42);
    expect(batches).toEqual([[21]]);
  });

  it('puts calls made together in one batch, and calls made while it runs in the next', async () => {
    const batches: number[][] = [];
    const gates = [deferred<void>(), deferred<void>()];
    const b = new Batcher(
      async (xs: number[]) => {
        batches.push(xs);
        await gates[batches.length - 1]!.promise;
        return xs.map((x) => -x);
      },
      { maxBatch: 100, maxInFlight: 1 },
    );
    const first = [1, 2, 3].map((x) => b.load(x));
    await tick();
    const second = [4, 5].map((x) => b.load(x));
    await tick();
    expect(batches).toEqual([[1, 2, 3]]); // the second group waits for a free slot
    gates[0]!.resolve();
    expect(await Promise.all(first)).toEqual([-1, -2, -3]);
    gates[1]!.resolve();
    expect(await Promise.all(second)).toEqual([-4, -5]);
    expect(batches).toEqual([
      [1, 2, 3],
      [4, 5],
    ]);
  });

  it('splits at maxBatch and runs up to maxInFlight batches at once', async () => {
    let running = 0;
    let most = 0;
    const sizes: number[] = [];
    const b = new Batcher(
      async (xs: number[]) => {
        sizes.push(xs.length);
        most = Math.max(most, ++running);
        await sleep(5);
        running--;
        return xs;
      },
      { maxBatch: 4, maxInFlight: 2 },
    );
    const out = await Promise.all(Array.from({ length: 20 }, (_, i) => b.load(i)));
    expect(out).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(Math.max(...sizes)).toBe(4);
    expect(sizes.reduce((a, c) => a + c, 0)).toBe(20);
    expect(most).toBe(2);
  });

  it('fails only the calls of a failing batch', async () => {
    let n = 0;
    const b = new Batcher(
      async (xs: number[]) => {
        if (n++ === 0) throw new Error('boom');
        return xs;
      },
      { maxBatch: 10, maxInFlight: 1 },
    );
    const failing = [b.load(1), b.load(2)];
    await expect(Promise.all(failing)).rejects.toThrow('boom');
    await expect(failing[1]).rejects.toThrow('boom');
    expect(await b.load(3)).toBe(3);
  });

  it('with alone, runs the items of a failed batch one by one: each caller gets its own answer', async () => {
    const runs: number[][] = [];
    const b = new Batcher(
      async (xs: number[]) => {
        runs.push(xs);
        if (xs.includes(13)) throw new Error(`refused ${xs.join(',')}`);
        return xs.map((x) => x * 10);
      },
      { maxBatch: 10, maxInFlight: 1, alone: true },
    );
    const settled = await Promise.allSettled([1, 13, 2, 3].map((x) => b.load(x)));
    expect(settled.map((s) => (s.status === 'fulfilled' ? s.value : (s.reason as Error).message))).toEqual([10, 'refused 13', 20, 30]);
    expect(runs).toEqual([[1, 13, 2, 3], [1], [13], [2], [3]]);
  });

  it('with alone, fails a batch at once on a database outage (alone, every item would fail alike)', async () => {
    let calls = 0;
    const outage = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    const b = new Batcher(
      async (xs: number[]) => {
        calls++;
        if (calls === 1) throw outage;
        return xs;
      },
      { maxBatch: 10, maxInFlight: 1, alone: true },
    );
    const settled = await Promise.allSettled([1, 2, 3].map((x) => b.load(x)));
    expect(settled.every((s) => s.status === 'rejected' && s.reason === outage)).toBe(true);
    expect(calls).toBe(1);
  });
});

/** Counts the statements run under each name. */
function counting(db: Database): { db: Database; count: (name: string) => number } {
  const counts = new Map<string, number>();
  const wrapped = beforeEachQuery(db, (s) => void counts.set(s.name, (counts.get(s.name) ?? 0) + 1));
  return { db: wrapped, count: (name) => counts.get(name) ?? 0 };
}

describe.each(backends)('batched statements on $name', (backend) => {
  let db: Database;
  const ids: Record<string, number> = {};
  beforeAll(async () => {
    db = await backend.open();
    for (const name of ['a', 'b', 'c', 'd']) {
      await createNode(db, name);
      ids[name] = (await findNodeByName(db, name))!.id;
    }
  });
  afterAll(async () => db.close());

  const report = (node: string, jobId: string, status: 'success' | 'error', result: Record<string, unknown> = {}): Report => ({
    nodeId: ids[node]!,
    jobId,
    modelName: `m-${jobId.length % 3}`,
    status,
    result,
    defaultPoints: 2,
  });

  it('records concurrent reports with the outcomes each would have alone, in fewer statements', async () => {
    const { db: counted, count } = counting(db);
    const recorder = new ResultRecorder(counted, { batch: { maxBatch: 16, maxInFlight: 2 } });
    // Jobs recorded as errors before, to be upgraded inside the burst.
    for (let i = 0; i < 5; i++) await recordResult(db, report('a', `up-${i}`, 'error'));
    const burst: Report[] = [];
    for (let i = 0; i < 60; i++) burst.push(report(['a', 'b', 'c'][i % 3]!, `new-${i}`, i % 7 === 0 ? 'error' : 'success', { i }));
    for (let i = 0; i < 5; i++) burst.push(report('a', `up-${i}`, 'success'));
    // The same report three times, and one job reported by two nodes, inside the burst.
    for (let i = 0; i < 3; i++) burst.push(report('b', 'dup', 'success', { same: true }));
    burst.push(report('c', 'contested', 'success'), report('d', 'contested', 'success'));

    const outcomes = await Promise.all(burst.map((r) => recorder.record(r)));

    const kinds = (jobId: string) =>
      outcomes
        .filter((_, i) => burst[i]!.jobId === jobId)
        .map((o) => o.kind)
        .sort();
    for (let i = 0; i < 60; i++)
      expect(outcomes[i]).toEqual({ kind: 'recorded', status: i % 7 === 0 ? 'error' : 'success', points: i % 7 === 0 ? 0 : 2 });
    for (let i = 0; i < 5; i++) expect(kinds(`up-${i}`)).toEqual(['recorded']);
    expect(kinds('dup')).toEqual(['recorded', 'replayed', 'replayed']);
    expect(kinds('contested')).toEqual(['conflict', 'recorded']);
    expect(count('results_credit')).toBeLessThan(burst.length / 2);

    const { stored, recomputed } = await aggregatesAndRecomputation(db);
    expect(stored).toEqual(recomputed);
    const success = burst.filter((r, i) => r.status === 'success' && outcomes[i]!.kind === 'recorded').length;
    const [total] = await db.query<{ p: number }>({ name: 'batch_total', text: 'SELECT sum(points)::float8 AS p FROM node_daily_points' });
    expect(total!.p).toBe(success * 2);
  });

  it('answers a report the database refuses by itself, and records the rest of its batch', async () => {
    const recorder = new ResultRecorder(db, { batch: { maxBatch: 16, maxInFlight: 1 } });
    // job_id is at most 128 characters in the table; the request schema says so too, so only
    // a caller bypassing validation can get here — the point is that it stays its own failure.
    const bad = report('a', 'x'.repeat(200), 'success');
    const good = [1, 2, 3].map((i) => report('b', `ok-with-bad-${i}`, 'success'));
    const settled = await Promise.allSettled([good[0]!, bad, good[1]!, good[2]!].map((r) => recorder.record(r)));
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    const [row] = await db.query<{ n: number }>({
      name: 'batch_ok_count',
      text: "SELECT count(*)::int AS n FROM job_results WHERE job_id LIKE 'ok-with-bad-%'",
    });
    expect(row!.n).toBe(3);
  });

  it('retries a refused batch of several groups item by item, each recorded once and told so', async () => {
    const recorder = new ResultRecorder(db, { batch: { maxBatch: 16, maxInFlight: 1 } });
    // Explicit times make groups of their own: the batch is one transaction, so the groups
    // that went before the refused report commit nothing and are recorded alone, as new.
    const at = (r: Report, receivedAt: string): Report => ({ ...r, receivedAt });
    const good = [at(report('c', 'groups-1', 'success'), '2026-01-01T00:00:00Z'), at(report('c', 'groups-2', 'success'), '2026-01-02T00:00:00Z')];
    const bad = at(report('c', 'y'.repeat(200), 'success'), '2026-01-03T00:00:00Z');
    const settled = await Promise.allSettled([good[0]!, good[1]!, bad].map((r) => recorder.record(r)));
    expect(settled.map((s) => (s.status === 'fulfilled' ? s.value.kind : 'rejected'))).toEqual(['recorded', 'recorded', 'rejected']);
    const { stored, recomputed } = await aggregatesAndRecomputation(db);
    expect(stored).toEqual(recomputed);
  });

  it('gives concurrent daily_points requests the answers they get alone, in fewer statements', async () => {
    const { db: counted, count } = counting(db);
    const loader = new PointsLoader(counted, { batch: { maxBatch: 8, maxInFlight: 1 } });
    const asks = Array.from({ length: 24 }, (_, i) => ({ nodeName: ['a', 'b', 'c', 'd', 'nobody'][i % 5]!, lastDays: [1, 7, 30][i % 3]! }));
    const together = (await Promise.all(asks.map((a) => loader.loadJson(a.nodeName, a.lastDays)))).map((j) =>
      j === undefined ? j : (JSON.parse(j) as { date: string; points: number }[]),
    );
    for (const [i, a] of asks.entries()) {
      const alone = await dailyPoints(db, a.nodeName, a.lastDays);
      expect(together[i]).toEqual(alone);
      if (a.nodeName === 'nobody') expect(alone).toBeUndefined();
      else expect(alone).toHaveLength(a.lastDays);
    }
    expect(together.some((d) => d?.some((p) => p.points > 0))).toBe(true);
    expect(count('points_daily')).toBeLessThanOrEqual(asks.length / 8 + 1);
  });
});
