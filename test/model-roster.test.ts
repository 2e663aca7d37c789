// The in-memory rosters answer unique_nodes exactly even when other servers write: a new node
// for a model bumps the version (reload), and later successes of known nodes — which leave the
// cached last success behind — are decided by the database.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type Database } from '../src/db/database.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { RosterCache } from '../src/repositories/model-roster.js';
import { ResultRecorder } from '../src/results/recorder.js';
import { recordResult, rosterNames } from './helpers/production-paths.js';
import fc from 'fast-check';
import { backends, beforeEachQuery } from './helpers/db.js';
import { sleep } from './helpers/wait.js';

const BRUTE = `SELECT n.name FROM job_results r JOIN nodes n ON n.id = r.node_id JOIN models m ON m.id = r.model_id
  WHERE m.name = $1 AND r.status = 'success' AND r.received_at BETWEEN $2::timestamptz AND $3::timestamptz GROUP BY n.name ORDER BY n.name COLLATE "C"`;

describe.each(backends)('model rosters on $name', (backend) => {
  let db: Database;
  const ids: Record<string, number> = {};
  let job = 0;
  const report = (node: string, model = 'roster-model') =>
    recordResult(db, { nodeId: ids[node]!, jobId: `r-${job++}`, modelName: model, status: 'success', result: {}, defaultPoints: 1 });
  const brute = async (model: string, s: string | null, e: string | null) =>
    (await db.query<{ name: string }>(sql('t_brute_roster', BRUTE), [model, s ?? '-infinity', e ?? 'infinity'])).map((r) => r.name);
  const now = async () =>
    (await db.query<{ t: string }>(sql('t_now', `SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS t`)))[0]!.t;

  beforeAll(async () => {
    db = await backend.open();
    for (const n of ['n-a', 'n-b', 'n-c']) ids[n] = (await createNode(db, n)).id;
  });
  afterAll(async () => db.close());

  it('stays exact while two servers read and the history grows', async () => {
    // A long maxAge: only the version and the database keep the answers right.
    const serverA = new RosterCache(db, { maxAgeMs: 3_600_000 });
    const serverB = new RosterCache(db, { maxAgeMs: 3_600_000 });
    await report('n-a');
    await sleep(15);
    const t1 = await now();
    expect(await rosterNames(serverA, 'roster-model', null, null)).toEqual(['n-a']);
    expect(await rosterNames(serverB, 'roster-model', null, null)).toEqual(['n-a']);

    // A node new to the model: both servers see it at once.
    await sleep(15);
    await report('n-b');
    expect(await rosterNames(serverA, 'roster-model', null, null)).toEqual(['n-a', 'n-b']);
    expect(await rosterNames(serverB, 'roster-model', t1, null)).toEqual(['n-b']);

    // A known node reports again: no version change, the cached last success is stale.
    await sleep(15);
    const t2 = await now();
    await sleep(15);
    await report('n-a');
    await sleep(15);
    const t3 = await now();
    for (const cache of [serverA, serverB]) {
      expect(await rosterNames(cache, 'roster-model', t2, null)).toEqual(['n-a']);
      expect(await rosterNames(cache, 'roster-model', t2, t3)).toEqual(['n-a']);
      expect(await rosterNames(cache, 'roster-model', t1, t2)).toEqual(['n-b']);
      expect(await rosterNames(cache, 'roster-model', null, t1)).toEqual(['n-a']);
    }
    for (const [s, e] of [
      [null, null],
      [t1, null],
      [t2, t3],
      [t1, t2],
      [null, t1],
      [t3, null],
    ] as const) {
      expect(await rosterNames(serverA, 'roster-model', s, e)).toEqual(await brute('roster-model', s, e));
    }
  });

  it('stays exact over days of reports through the API, with versions bumped only by new days', async () => {
    const HOUR = 3_600_000;
    const iso = (ms: number) => new Date(ms).toISOString();
    type Op =
      | { kind: 'report'; node: number; model: number }
      | { kind: 'wait'; ms: number }
      | { kind: 'ask'; model: number; back: number; length: number | null };
    const opArb: fc.Arbitrary<Op> = fc.oneof(
      {
        arbitrary: fc.record({ kind: fc.constant('report' as const), node: fc.integer({ min: 0, max: 3 }), model: fc.integer({ min: 0, max: 1 }) }),
        weight: 4,
      },
      { arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 1, max: 40 * HOUR }) }), weight: 2 },
      // Windows back from now: ending now (length null) or earlier.
      {
        arbitrary: fc.record({
          kind: fc.constant('ask' as const),
          model: fc.integer({ min: 0, max: 1 }),
          back: fc.integer({ min: 0, max: 80 * HOUR }),
          length: fc.option(fc.integer({ min: 0, max: 50 * HOUR })),
        }),
        weight: 4,
      },
    );
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 10, maxLength: 50 }), async (ops) => {
        run++;
        const nodes: number[] = [];
        for (let i = 0; i < 4; i++) nodes.push((await createNode(db, `days-${run}-${i}`)).id);
        const models = [0, 1].map((m) => `days-${run}-m${m}`);
        // Runs start apart so that one run's reports are never in another's windows.
        let clock = Date.parse('2030-01-01T00:00:00Z') + run * 1000 * HOUR;
        const recorder = new ResultRecorder(db, { clock: () => iso(clock) });
        const servers = [new RosterCache(db, { maxAgeMs: 3_600_000 }), new RosterCache(db, { maxAgeMs: 3_600_000 })];
        let jobs = 0;
        for (const op of ops) {
          if (op.kind === 'report') {
            await recorder.record({
              nodeId: nodes[op.node]!,
              jobId: `days-${run}-${jobs++}`,
              modelName: models[op.model]!,
              status: 'success',
              result: {},
              defaultPoints: 1,
            });
            clock += 1;
          }
          if (op.kind === 'wait') clock += op.ms;
          if (op.kind === 'ask') {
            const start = iso(clock - op.back);
            const end = op.length === null ? null : iso(clock - op.back + op.length);
            const expected = await brute(models[op.model]!, start, end);
            for (const server of servers) expect(await rosterNames(server, models[op.model]!, start, end)).toEqual(expected);
          }
        }
      }),
      { numRuns: 30, seed: 20261126 },
    );
  });

  it('falls back to the exact query when the version moves at every look', async () => {
    await report('n-c', 'restless-model');
    await report('n-a', 'restless-model');
    const names: string[] = [];
    // Another server bumps the version just before each of this server's checks.
    const restless = beforeEachQuery(db, async (s) => {
      names.push(s.name);
      if (s.name === 'roster_check')
        await db.query(sql('t_bump', "UPDATE models SET roster_version = roster_version + 1 WHERE name = 'restless-model'"));
    });
    const cache = new RosterCache(restless);
    expect(await rosterNames(cache, 'restless-model', null, null)).toEqual(['n-a', 'n-c']);
    expect(names).toContain('unique_nodes');
    expect(names.filter((n) => n === 'roster_check')).toHaveLength(3);
  });

  it('answers an unknown model with no nodes', async () => {
    expect(await rosterNames(new RosterCache(db), 'never-reported', null, null)).toEqual([]);
  });
});
