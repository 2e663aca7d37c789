// Bulk import of nodes and results history, on each backend (COPY on PostgreSQL, batches on
// PGlite): identical answers to the same history reported through the API, all-or-nothing
// with line-numbered reports, and keys that keep working.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { hashKey } from '../src/keys.js';
import { nodesImport } from '../src/import/nodes.js';
import { resultsImport } from '../src/import/results.js';
import { ImportRejected, runImport } from '../src/import/run.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { snapshot } from './helpers/state.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';

const dir = mkdtempSync(path.join(tmpdir(), 'ins-import-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let fileNo = 0;
const csv = (text: string): string => {
  const file = path.join(dir, `f${fileNo++}.csv`);
  writeFileSync(file, text);
  return file;
};
const quote = (v: string): string => (/[",\n]/.test(v) ? `"${v.replace(/"/g, '""')}"` : v);
const opts = { skipBadRows: false, progress: false };

describe.each(backends)('import on $name', (backend) => {
  it('gives the same answers as the same history reported through the API', async () => {
    const live = await startApp(backend);
    const keys: Record<string, string> = {};
    for (const n of ['n-a', 'n-b', 'n-c']) keys[n] = await live.addNode(n);
    const post = (payload: object) => live.app.inject({ method: 'POST', url: '/worker/update_result', payload });
    // A history with errors, upgrades, replays and conflicts, through the API.
    let seed = 7;
    const rnd = (n: number) => (seed = (seed * 48271) % 2147483647) % n;
    for (let i = 0; i < 120; i++) {
      const node = ['n-a', 'n-b', 'n-c'][rnd(3)]!;
      await post({
        job_id: `job-${rnd(60)}`,
        api_key: keys[node],
        model_name: ['llama', 'mistral', 'qwen'][rnd(3)],
        result: { message: `r${rnd(2)}` },
        status: rnd(4) === 0 ? 'error' : 'success',
      });
    }
    const rows = await live.db.query<Record<string, string>>(
      sql(
        'export',
        `SELECT r.job_id, n.name AS node_name, m.name AS model_name, r.status, r.points::text AS points,
        to_char(r.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS received_at, r.result::text AS result
      FROM job_results r JOIN nodes n ON n.id = r.node_id JOIN models m ON m.id = r.model_id ORDER BY r.job_id`,
      ),
    );
    expect(rows.length).toBeGreaterThan(30);
    const header = 'job_id,node_name,model_name,status,points,received_at,result';
    const resultsFile = csv(
      [
        header,
        ...rows.map((r) => [r.job_id, r.node_name, r.model_name, r.status, r.points, r.received_at, r.result].map((v) => quote(v!)).join(',')),
      ].join('\n'),
    );
    const nodesFile = csv(['name,api_key', ...Object.entries(keys).map(([n, k]) => `${n},${k}`)].join('\n'));

    const imported = await startApp(backend);
    expect((await runImport(imported.db, nodesFile, nodesImport, opts)).imported).toBe(3);
    const summary = await runImport(imported.db, resultsFile, resultsImport, opts);
    expect(summary).toMatchObject({ rows_read: rows.length, imported: rows.length, bad_rows: 0 });

    const reader = { live: await live.addReader(), imported: await imported.addReader() };
    for (const node of Object.keys(keys)) {
      const ask = (t: typeof live, key: string) =>
        t.app.inject({ method: 'POST', url: '/daily_points', headers: { api_key: key }, payload: { node_name: node, last_days: 3 } });
      const want = (await ask(live, reader.live)).json();
      expect((await ask(imported, reader.imported)).json()).toEqual(want);
      // The node's own key works after the import.
      expect((await ask(imported, keys[node]!)).json()).toEqual(want);
    }
    const now = new Date();
    const windows = [
      '',
      `&start_date=${encodeURIComponent(new Date(now.getTime() - 60_000).toISOString())}`,
      `&end_date=${encodeURIComponent(now.toISOString())}`,
    ];
    for (const model of ['llama', 'mistral', 'qwen', 'none']) {
      for (const w of windows) {
        const url = `/unique_nodes?model_name=${model}${w}`;
        expect((await imported.app.inject({ method: 'GET', url })).json()).toEqual((await live.app.inject({ method: 'GET', url })).json());
      }
    }
    // And the stored aggregates agree row for row (ids aside).
    const aggregates = (t: typeof live) =>
      t.db.query(
        sql(
          'agg',
          `SELECT n.name, d.day::text, d.points::float8, d.successes FROM node_daily_points d JOIN nodes n ON n.id = d.node_id ORDER BY 1, 2`,
        ),
      );
    expect(await aggregates(imported)).toEqual(await aggregates(live));
    await live.close();
    await imported.close();
  });

  it('keeps the aggregates equal to a recomputation from job_results after random imports', async () => {
    const t = await startApp(backend);
    const nodes = ['p-a', 'p-b', 'p-c'];
    await runImport(t.db, csv(['name,api_key', ...nodes.map((n) => `${n},key-of-${n}`)].join('\n')), nodesImport, opts);
    const base = Date.parse('2024-06-01T00:00:00Z');
    const rowArb = fc.record({
      node: fc.constantFrom(...nodes),
      model: fc.constantFrom('m-a', 'm-b'),
      status: fc.constantFrom('success', 'error'),
      points: fc.constantFrom('1', '2.5', '0'),
      // Within four days, often near midnight, at microsecond precision.
      at: fc.oneof(
        fc.integer({ min: 0, max: 4 * 86_400_000 }),
        fc.integer({ min: 0, max: 3 }).map((d) => (d + 1) * 86_400_000 - 1),
      ),
      micros: fc.integer({ min: 0, max: 999 }),
    });
    let run = 0;
    // Each run imports onto what the previous ones left: aggregates grow by exactly the file.
    await fc.assert(
      fc.asyncProperty(fc.array(rowArb, { minLength: 1, maxLength: 25 }), async (rows) => {
        run++;
        const lines = rows.map((r, i) => {
          const at = new Date(base + r.at).toISOString().replace('Z', `${String(r.micros).padStart(3, '0')}Z`);
          return [`imp-${run}-${i}`, r.node, r.model, r.status, r.status === 'error' ? '0' : r.points, at].join(',');
        });
        await runImport(t.db, csv(['job_id,node_name,model_name,status,points,received_at', ...lines].join('\n')), resultsImport, opts);
        const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
        expect(stored).toEqual(recomputed);
      }),
      { numRuns: 15, seed: 20261122 },
    );
    await t.close();
  });

  it('rejects a file with bad rows as a whole, naming each by line', async () => {
    const t = await startApp(backend);
    await t.addNode('known');
    const before = await snapshot(t.db);
    const file = csv(
      [
        'job_id,node_name,model_name,status,points,received_at',
        'ok-1,known,llama,success,1,2024-05-01T10:00:00Z',
        'bad-1,known,llama,finished,1,2024-05-01T10:00:00Z',
        'bad-2,ghost,llama,success,1,2024-05-01T10:00:00Z',
        'ok-1,known,llama,success,1,2024-05-01T11:00:00Z',
        'bad-3,known,llama,error,3,2024-05-01T10:00:00Z',
        'bad-4,known,llama,success,1,last tuesday',
        'bad-5,known,llama,success,-1,2024-05-01T10:00:00Z',
        'bad-6,known,llama,success,1',
        'bad-7,known,llama,success,1,2099-03-01T10:00:00Z',
      ].join('\n'),
    );
    const err = await runImport(t.db, file, resultsImport, opts).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ImportRejected);
    expect((err as ImportRejected).examples.map((b) => b.line)).toEqual([3, 4, 5, 6, 7, 8, 9, 10]);
    expect((err as ImportRejected).examples[7]!.reason).toMatch(/^received_at 2099-03-01T10:00:00Z is in the future/);
    expect((err as ImportRejected).examples[1]!.reason).toMatch(/unknown node "ghost"/);
    expect((err as ImportRejected).examples[2]!.reason).toMatch(/repeats line 2/);
    expect(await snapshot(t.db)).toEqual(before);

    const skipped = await runImport(t.db, file, resultsImport, { skipBadRows: true, progress: false });
    expect(skipped).toMatchObject({ rows_read: 9, imported: 1, bad_rows: 8 });
    // Importing the same history again: every row is already recorded.
    const again = await runImport(t.db, file, resultsImport, opts).catch((e: unknown) => e);
    expect((again as ImportRejected).examples[0]!.reason).toMatch(/already recorded/);
    await t.close();
  });

  it('imports nodes by key hash, keeps legacy keys working, and refuses clashes', async () => {
    const t = await startApp(backend);
    const legacyKey = 'legacy-worker-key-0001';
    const file = csv(`name,api_key_sha256\nold-rig,${hashKey(legacyKey).toUpperCase()}\n`);
    expect((await runImport(t.db, file, nodesImport, opts)).imported).toBe(1);
    const res = await t.app.inject({
      method: 'POST',
      url: '/worker/update_result',
      payload: { job_id: 'j', api_key: legacyKey, model_name: 'm', result: {}, status: 'success' },
    });
    expect(res.statusCode).toBe(200);
    const clash = csv(`name,api_key\nold-rig,other\nnew-rig,${legacyKey}\n`);
    const err = (await runImport(t.db, clash, nodesImport, opts).catch((e: unknown) => e)) as ImportRejected;
    expect(err.examples.map((b) => [b.line, b.reason])).toEqual([
      [2, 'node "old-rig" already exists'],
      [3, 'this key already belongs to another node'],
    ]);
    await t.close();
  });

  it('refuses a file with the wrong columns or broken CSV, importing nothing', async () => {
    const t = await startApp(backend);
    await expect(runImport(t.db, csv('name,key\nx,y\n'), nodesImport, opts)).rejects.toThrow(
      /line 1: expected the columns name,api_key or name,api_key_sha256/,
    );
    await expect(runImport(t.db, csv('name,api_key\n"x,y\n'), nodesImport, opts)).rejects.toThrow(/malformed CSV/);
    await expect(runImport(t.db, csv(''), nodesImport, opts)).rejects.toThrow(/empty/);
    // Latin-1 (é as one byte): not silently a U+FFFD in a node's name.
    const latin1 = path.join(dir, `f${fileNo++}.csv`);
    writeFileSync(latin1, Buffer.concat([Buffer.from('name,api_key\ncaf'), Buffer.from([0xe9]), Buffer.from('-node,key-1\n')]));
    await expect(runImport(t.db, latin1, nodesImport, opts)).rejects.toThrow(/the file is not UTF-8 .*save it as UTF-8/);
    expect((await snapshot(t.db)).nodes).toEqual([]);
    await t.close();
  });

  it('takes each result as the JSON object it is, and a NUL in one as a bad row', async () => {
    const t = await startApp(backend);
    const key = await t.addNode('known');
    const file = csv(
      [
        'job_id,node_name,model_name,status,points,received_at,result',
        'obj-1,known,llama,success,1,2024-05-01T10:00:00Z,"{""message"":""hello""}"',
        'obj-2,known,llama,success,1,2024-05-01T10:00:00Z,',
        'nul-1,known,llama,success,1,2024-05-01T10:00:00Z,"{""message"":""a\\u0000b""}"',
      ].join('\n'),
    );
    const err = await runImport(t.db, file, resultsImport, opts).catch((e: unknown) => e);
    expect((err as ImportRejected).examples).toEqual([
      expect.objectContaining({ line: 4, reason: expect.stringMatching(/^result: text with the NUL character/) }),
    ]);
    expect(await runImport(t.db, file, resultsImport, { skipBadRows: true, progress: false })).toMatchObject({ imported: 2, bad_rows: 1 });
    expect(await t.db.query(sql('t_types', 'SELECT job_id, jsonb_typeof(result) AS type FROM job_results ORDER BY job_id'))).toEqual([
      { job_id: 'obj-1', type: 'object' },
      { job_id: 'obj-2', type: 'object' },
    ]);
    // The node re-sending an imported report is a replay, as if it had been reported live.
    const again = await t.app.inject({
      method: 'POST',
      url: '/worker/update_result',
      payload: { job_id: 'obj-1', api_key: key, model_name: 'llama', result: { message: 'hello' }, status: 'success' },
    });
    expect(again.json()).toMatchObject({ status: 'success', replayed: true, points: 0 });
    await t.close();
  });
});
