// The settled days each server keeps (repositories/points.ts) never make an answer stale:
// random writes — reports landing on today or yesterday (no version bump, as through the
// API), successes at explicit earlier times (as imports and tests record them), days rolling
// over — interleaved with reads; every read equals the database's answer at that moment.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type Database } from '../src/db/database.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { PointsLoader } from '../src/repositories/points.js';
import { dailyPoints, recordResult } from './helpers/production-paths.js';
import { backends, beforeEachQuery } from './helpers/db.js';

const DAY_MS = 86_400_000;
const shift = (day: string, by: number) => new Date(Date.parse(`${day}T00:00:00Z`) + by * DAY_MS).toISOString().slice(0, 10);

// What a report through the API does to the points of a recent day: no version bump.
const ADD_RECENT = sql(
  'test_add_recent',
  `INSERT INTO node_daily_points (node_id, day, points, successes)
  SELECT id, $2::date, $3::numeric, 1 FROM nodes WHERE name = $1::text
  ON CONFLICT (node_id, day) DO UPDATE SET points = node_daily_points.points + EXCLUDED.points, successes = node_daily_points.successes + 1`,
);

type Op =
  | { kind: 'recent'; node: number; back: 0 | 1; points: number }
  | { kind: 'explicit'; node: number; back: number }
  | { kind: 'next-day' }
  | { kind: 'read'; node: number; days: number };

// Two nodes and one name that is no node; reads and recent reports weigh most.
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    arbitrary: fc.record({ kind: fc.constant('read' as const), node: fc.integer({ min: 0, max: 2 }), days: fc.constantFrom(1, 2, 3, 5, 10, 14) }),
    weight: 4,
  },
  {
    arbitrary: fc.record({
      kind: fc.constant('recent' as const),
      node: fc.integer({ min: 0, max: 1 }),
      back: fc.constantFrom(0 as const, 1 as const),
      points: fc.integer({ min: 1, max: 5 }),
    }),
    weight: 3,
  },
  {
    arbitrary: fc.record({ kind: fc.constant('explicit' as const), node: fc.integer({ min: 0, max: 1 }), back: fc.integer({ min: 0, max: 12 }) }),
    weight: 1,
  },
  { arbitrary: fc.constant({ kind: 'next-day' as const }), weight: 1 },
);

describe.each(backends)('cached daily points on $name', (backend) => {
  let db: Database;
  beforeAll(async () => {
    db = await backend.open();
  });
  afterAll(async () => db.close());

  it('always answer like the database', async () => {
    let run = 0;
    let reads = 0;
    let recents = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 10, maxLength: 40 }), async (ops) => {
        run++;
        const names = [0, 1].map((i) => `cache-${run}-${i}`);
        for (const n of names) await createNode(db, n);
        let today = '2025-03-10';
        const loader = new PointsLoader(db, { today: () => today, batch: { maxBatch: 8, maxInFlight: 2 } });
        let job = 0;
        for (const op of ops) {
          if (op.kind === 'recent') await db.query(ADD_RECENT, [names[op.node], shift(today, -op.back), op.points]);
          if (op.kind === 'explicit') {
            const [node] = await db.query<{ id: number }>(sql('test_node_id', 'SELECT id FROM nodes WHERE name = $1'), [names[op.node]]);
            await recordResult(db, {
              nodeId: Number(node!.id),
              jobId: `cache-${run}-${job++}`,
              modelName: 'm',
              status: 'success',
              result: {},
              defaultPoints: 1,
              receivedAt: `${shift(today, -op.back)}T12:00:00Z`,
            });
          }
          if (op.kind === 'next-day') today = shift(today, 1);
          if (op.kind === 'read') {
            const name = names[op.node] ?? 'nobody';
            // Two at once, to go through a shared statement too.
            const [a, b] = await Promise.all([loader.loadJson(name, op.days), loader.loadJson(name, op.days)]);
            const expected = await dailyPoints(db, name, op.days, today);
            expect(a === undefined ? undefined : JSON.parse(a)).toEqual(expected);
            expect(b).toEqual(a);
            if (expected) expect(expected.at(-1)!.date).toBe(today);
          }
        }
        reads += ops.filter((o) => o.kind === 'read').length;
        recents += ops.filter((o) => o.kind === 'recent').length;
      }),
      { numRuns: 40, seed: 20261126 },
    );
    // The generated sequences did read, and after new points: the property was exercised.
    expect(reads).toBeGreaterThan(40);
    expect(recents).toBeGreaterThan(40);
  });

  it('reads only yesterday and today once the older days are known', async () => {
    await createNode(db, 'cache-calls');
    const seen: number[][] = [];
    const counted = beforeEachQuery(db, (s, values) => {
      if (s.name === 'points_daily') seen.push([...(values[1] as number[])]);
    });
    const loader = new PointsLoader(counted, { batch: { maxBatch: 8, maxInFlight: 1 } });
    const first = await loader.loadJson('cache-calls', 30);
    const second = await loader.loadJson('cache-calls', 20);
    expect(seen).toEqual([[30], [2]]);
    expect(JSON.parse(second!)).toEqual(JSON.parse(first!).slice(10));
  });
});
