// PostgreSQL stopped and started again while workers report and a dashboard reads. Requests in
// flight or arriving while it is down must fail with 503 (not hang, not 500) — a report first
// rides out up to 5 s of it (src/db/outage.ts: a 5xx stops the seed's worker for hours), so it
// may also get its 200 once the database is back — the service must recover by itself, and
// every report that got a 200 must be stored exactly once. This restarts the machine's
// PostgreSQL, so it runs alone: `npm run test:faults` (called by .ci/run after `npm test`).
import { afterAll, describe, expect, it } from 'vitest';
import { sql } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrate.js';
import { openPostgres } from '../../src/db/pg.js';
import { createNode } from '../../src/nodes/lifecycle.js';
import { createPostgresDatabase, TEST_DATABASE_URL } from '../helpers/db.js';
import { startServerProcess, type ServerProcess } from '../helpers/process.js';
import { cluster, pgctl, pgReady } from '../helpers/pg-cluster.js';
import { sleep } from '../helpers/wait.js';

describe.runIf(TEST_DATABASE_URL && cluster)('PostgreSQL restarted under load', () => {
  let server: ServerProcess | undefined;
  let drop: (() => Promise<void>) | undefined;
  afterAll(async () => {
    await pgReady();
    server?.child.kill('SIGTERM');
    await server?.exited;
    await drop?.();
  });

  it('503 while it is away (reports ride it out first), recovery without help, every 200 stored exactly once', async () => {
    const created = await createPostgresDatabase(undefined, { durable: true });
    drop = created.drop;
    const setup = openPostgres({ connectionString: created.url });
    await migrate(setup);
    const { key } = await createNode(setup, 'steady');
    await setup.close();
    server = await startServerProcess({ DATABASE_URL: created.url, SHUTDOWN_TIMEOUT_MS: '2000' });

    const acked: string[] = [];
    const statuses = new Map<string, number>();
    const failures: string[] = [];
    let phase = 'before';
    let stop = false;
    const reporters = Array.from({ length: 8 }, async (_, w) => {
      for (let i = 0; !stop; i++) {
        const job_id = `w${w}-${i}`;
        try {
          const res = await fetch(`${server!.url}/worker/update_result`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ job_id, api_key: key, model_name: 'm', result: { message: 'ok' }, status: 'success' }),
            signal: AbortSignal.timeout(10_000),
          });
          const tag = `${phase}:${res.status}`;
          statuses.set(tag, (statuses.get(tag) ?? 0) + 1);
          if (res.status === 200) acked.push(job_id);
          else if (res.status !== 503) failures.push(`${job_id}: ${res.status} ${await res.text()}`);
          else await sleep(50);
        } catch (err) {
          failures.push(`${job_id}: ${(err as Error).name} ${(err as Error).message}`);
        }
      }
    });

    // A dashboard's reads are answered at once, 503 while the database is away.
    const reads = new Map<string, number>();
    const reader = (async () => {
      while (!stop) {
        try {
          const res = await fetch(`${server!.url}/daily_points`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', api_key: key },
            body: JSON.stringify({ node_name: 'steady', last_days: 1 }),
            signal: AbortSignal.timeout(10_000),
          });
          const tag = `${phase}:${res.status}`;
          reads.set(tag, (reads.get(tag) ?? 0) + 1);
          if (res.status !== 200 && res.status !== 503) failures.push(`daily_points: ${res.status} ${await res.text()}`);
        } catch (err) {
          failures.push(`daily_points: ${(err as Error).name} ${(err as Error).message}`);
        }
        await sleep(50);
      }
    })();

    await sleep(1000);
    phase = 'down';
    pgctl('stop -m fast');
    await sleep(2500);
    pgctl('start');
    await pgReady();
    phase = 'after';
    await sleep(4000);
    stop = true;
    await Promise.all([...reporters, reader]);

    expect(failures).toEqual([]);
    expect(reads.get('down:503') ?? 0).toBeGreaterThan(0);
    expect(reads.get('after:200') ?? 0).toBeGreaterThan(0);
    expect(statuses.get('after:200') ?? 0).toBeGreaterThan(0);
    expect((await fetch(`${server.url}/readyz`)).status).toBe(200);

    const check = openPostgres({ connectionString: created.url });
    try {
      const [stored] = await check.query<{ n: number }>(sql('t_acked', 'SELECT count(*)::int AS n FROM job_results WHERE job_id = ANY($1::text[])'), [
        acked,
      ]);
      expect(stored!.n).toBe(acked.length);
      // Exactly once: the aggregates hold one point per stored success, no more.
      const [sums] = await check.query<{ results: number; points: number }>(
        sql(
          't_sums',
          `SELECT
          (SELECT count(*)::int FROM job_results WHERE status = 'success') AS results,
          (SELECT coalesce(sum(points), 0)::int FROM node_daily_points) AS points`,
        ),
      );
      expect(sums!.points).toBe(sums!.results);
    } finally {
      await check.close();
    }
    if (process.env.INS_TEST_VERBOSE) console.log(Object.fromEntries(statuses), `acked ${acked.length}`);
  });
});
