// A reversal (verify/reversal.ts) racing with a credit of the same node (results/credit.ts), on
// real PostgreSQL: the credit's statement holds the node's daily row and its roster rows while
// the reversal runs. Whichever way they interleave, the aggregates must equal a recomputation
// from job_results and point_reversals. (Seen once in the whole suite: a suspension whose
// node's daily row held only the victims, a report of the same node committing meanwhile — the
// row kept the victims' points, and the suspended node 2 points.) PGlite has one connection:
// nothing can interleave there.
import { afterEach, describe, expect, it } from 'vitest';
import { sql, type Database } from '../src/db/database.js';
import { CREDIT_REPORTS } from '../src/results/credit.js';
import { reverse } from '../src/verify/reversal.js';
import { backends } from './helpers/db.js';
import { recordResult } from './helpers/production-paths.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { until } from './helpers/worker.js';

// The PostgreSQL backend. Without TEST_DATABASE_URL there is none: the suite is then registered
// and skipped rather than left out, since a file that registers no suite fails vitest's run.
const backend = backends.find((b) => b.name !== 'pglite');

describe.runIf(backend)(`a reversal beside a credit of the same node on ${backend?.name}`, () => {
  let db: Database | undefined;
  afterEach(async () => {
    await db?.close();
    db = undefined;
  });

  it.each([
    { what: 'a strike of its only success of the day', which: () => ({ jobIds: ['j1'] }), left: { points: 1.5, successes: 1 } },
    {
      what: 'a suspension of its evidence window',
      which: (nodeId: number) => ({ nodes: [{ nodeId, seconds: 3600 }] }),
      left: { points: 0, successes: 0 },
    },
  ])('$what: the aggregates equal their recomputation', async ({ which, left }) => {
    db = await backend!.open();
    const q = <T>(name: string, text: string, values: unknown[] = []) => db!.query<T>(sql(name, text), values);
    const [node] = await q<{ id: number }>('t_rr_node', "INSERT INTO nodes (name, key_hash) VALUES ('racer', repeat('b', 64)) RETURNING id::int");
    const [model] = await q<{ id: number }>('t_rr_model', "INSERT INTO models (name) VALUES ('m') RETURNING id");
    const nodeId = node!.id;
    // The node's one success so far today: its daily row and its roster rows hold only it.
    await recordResult(db, { nodeId, jobId: 'j1', modelName: 'm', status: 'success', result: { message: 'x' }, defaultPoints: 1.5 });

    // A report of the same node, credited in a transaction left open until the reversal waits on it.
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    let credited!: () => void;
    const inCredit = new Promise<void>((r) => {
      credited = r;
    });
    const credit = db.transaction(async (tx) => {
      await tx.query(CREDIT_REPORTS, [['j2'], [nodeId], [model!.id], ['success'], [{ message: 'y' }], 1.5, null, false]);
      credited();
      await released;
    });
    await inCredit;
    const reversal = db.transaction((tx) => reverse(tx, which(nodeId), 'strike'));
    await until(
      "the reversal to wait on the credit's rows",
      async () =>
        (
          await q<{ n: number }>(
            't_rr_waiting',
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
          )
        )[0]!.n > 0,
    );
    release();
    await credit;
    await reversal;

    const { stored, recomputed } = await aggregatesAndRecomputation(db);
    expect(stored).toEqual(recomputed);
    const [daily] = await q<{ points: number; successes: number }>(
      't_rr_daily',
      'SELECT coalesce(sum(points), 0)::float8 AS points, coalesce(sum(successes), 0)::int AS successes FROM node_daily_points WHERE node_id = $1::bigint',
      [nodeId],
    );
    expect(daily).toEqual(left);
  });
});
