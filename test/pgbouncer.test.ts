// The service through Debian's PgBouncer (1.18) in transaction pooling, the way managed
// PostgreSQL and Kubernetes set-ups pool connections (src/db/pg.ts): no startup parameters,
// unnamed statements, settings per transaction, LISTEN on a direct connection; found out by
// itself when nobody says so (DATABASE_POOLER unset); and what still works with no direct
// connection at all. `npm run test:pgbouncer` runs the coordinator's end-to-end tests through
// it too.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { sql, type Database } from '../src/db/database.js';
import { migrate } from '../src/db/migrate.js';
import { openPostgres } from '../src/db/pg.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { addApiKey } from '../src/nodes/api-keys.js';
import { createPostgresDatabase, TEST_DATABASE_URL } from './helpers/db.js';
import { PGBOUNCER, startPgBouncer, type PgBouncer } from './helpers/pgbouncer.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';

const SETTINGS = sql('t_settings', "SELECT current_setting('statement_timeout') AS timeout, current_setting('jit') AS jit");
const NAMED = sql('t_named', 'SELECT $1::int + 1 AS n');

if (!PGBOUNCER) console.warn('test/pgbouncer.test.ts skipped: pgbouncer is not installed (Debian: apt-get install pgbouncer)');

describe.runIf(TEST_DATABASE_URL && PGBOUNCER)('through PgBouncer in transaction mode', () => {
  let bouncer: PgBouncer;
  let db: { name: string; url: string; drop: () => Promise<void> };
  const open: Database[] = [];
  const opened = (d: Database) => (open.push(d), d);

  beforeAll(async () => {
    bouncer = await startPgBouncer(TEST_DATABASE_URL!);
    const created = await createPostgresDatabase();
    db = { ...created, name: new URL(created.url).pathname.slice(1) };
  });
  afterAll(async () => {
    for (const d of open) await d.close();
    await db?.drop();
    await bouncer?.stop();
  });

  it('finds the pooler by itself (the startup parameter it refuses), migrates, and sets the timeout and no JIT in each transaction', async () => {
    const warnings: string[] = [];
    const d = opened(openPostgres({ connectionString: bouncer.url(db.name), directConnectionString: db.url, onWarning: (m) => warnings.push(m) }));
    await migrate(d);
    expect(await migrate(d)).toEqual([]);
    for (let i = 0; i < 5; i++) expect(await d.query(NAMED, [i])).toEqual([{ n: i + 1 }]);
    expect(await d.transaction((tx) => tx.query(SETTINGS))).toEqual([{ timeout: '15s', jit: 'off' }]);
    expect(warnings[0]).toMatch(/unsupported startup parameter: statement_timeout.*DATABASE_POOLER=transaction/);
    // Single statements get the database's defaults: the server says which to set, and how.
    await expect
      .poll(() => warnings.find((w) => w.includes('ALTER DATABASE')))
      .toContain(`ALTER DATABASE "${db.name}" SET statement_timeout = '15000ms'; ALTER DATABASE "${db.name}" SET jit = off;`);
  });

  it('finds it by a prepared statement on the wrong server connection too (startup parameters ignored), and the statement still runs', async () => {
    const lenient = await startPgBouncer(TEST_DATABASE_URL!, { ignore_startup_parameters: 'statement_timeout', default_pool_size: '1' });
    try {
      // Two pools, one server connection behind them: the second prepares a name the first left there.
      const warnings: string[] = [];
      const a = openPostgres({ connectionString: lenient.url(db.name), max: 1 });
      const b = openPostgres({ connectionString: lenient.url(db.name), max: 1, onWarning: (m) => warnings.push(m) });
      try {
        expect(await a.query(NAMED, [1])).toEqual([{ n: 2 }]);
        expect(await b.query(NAMED, [2])).toEqual([{ n: 3 }]);
        expect(warnings[0]).toMatch(/prepared statement "t_named" already exists/);
        expect(await b.transaction((tx) => tx.query(NAMED, [3]))).toEqual([{ n: 4 }]);
      } finally {
        await Promise.all([a.close(), b.close()]);
      }
    } finally {
      await lenient.stop();
    }
  });

  it("runs a statement marked plan: 'generic' through it like any other, also when that statement is the one that finds the pooler", async () => {
    const warnings: string[] = [];
    const d = opened(openPostgres({ connectionString: bouncer.url(db.name), directConnectionString: db.url, onWarning: (m) => warnings.push(m) }));
    const generic = sql('t_generic_through', "SELECT $1::int + 1 AS n, current_setting('plan_cache_mode') AS mode", { plan: 'generic' });
    expect(await d.query(generic, [1])).toEqual([{ n: 2, mode: 'auto' }]);
    expect(warnings[0]).toMatch(/unsupported startup parameter/);
    expect(await d.query(generic, [2])).toEqual([{ n: 3, mode: 'auto' }]);
  });

  it('hears NOTIFY sent through the pooler on the direct LISTEN connection', async () => {
    const d = opened(openPostgres({ connectionString: bouncer.url(db.name), directConnectionString: db.url, pooler: 'transaction' }));
    const heard: string[] = [];
    let live!: () => void;
    const isLive = new Promise<void>((r) => (live = r));
    const stop = await d.listen(
      't_channel',
      (p) => heard.push(p),
      (l) => l && live(),
    );
    await isLive;
    await d.query(sql('t_notify', "SELECT pg_notify('t_channel', $1::text)"), ['hello']);
    await expect.poll(() => heard).toEqual(['hello']);
    await stop();
  });

  it('without a direct connection: never listens (says so), and two servers still hand a job across by their once-a-second recheck', async () => {
    const warnings: string[] = [];
    const dbs = [0, 1].map(() =>
      opened(openPostgres({ connectionString: bouncer.url(db.name), pooler: 'transaction', max: 5, onWarning: (m) => warnings.push(m) })),
    );
    const lives: boolean[] = [];
    const stop = await dbs[0]!.listen(
      't_other',
      () => {},
      (l) => lives.push(l),
    );
    expect(lives).not.toContain(true);
    expect(warnings.join('\n')).toMatch(/set DATABASE_DIRECT_URL/);
    await stop();
    const apps = await Promise.all(dbs.map((d) => buildApp({ db: d, verify: { enabled: false }, coordinator: { sweepInterval: 0.2 } })));
    try {
      const worker = await new TestWorker(apps[0]!, 'node-nolisten', (await createNode(dbs[0]!, 'node-nolisten')).key).start(['lonely-model']);
      const user = new TestUser(apps[1]!, (await addApiKey(dbs[1]!, 'user', 'nolisten')).key);
      const waiting = worker.getJob(20);
      // The poll is waiting on server 0 before the job is submitted on server 1.
      await expect.poll(() => apps[0]!.metrics.live.waitingWorkers()).toBe(1);
      const jobId = await user.submit('lonely-model');
      const job = (await waiting)!;
      expect(job.job_id).toBe(jobId);
      expect((await worker.report(job, 'across')).statusCode).toBe(200);
      expect((await user.result(jobId)).json()).toMatchObject({ status: 'success', result: { message: { content: 'across' } } });
    } finally {
      for (const app of apps) await app.close();
    }
  });
});
