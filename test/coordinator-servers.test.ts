// Two servers on one PostgreSQL database, as a deployment runs them: a worker long-polling on
// one is woken the moment a job is submitted on the other (NOTIFY ins_jobs), a user waiting on
// one hears the result reported on the other (NOTIFY ins_results), and an expired lease is
// swept once whichever server gets there first.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { sql, type Database } from '../src/db/database.js';
import { migrate } from '../src/db/migrate.js';
import { openPostgres } from '../src/db/pg.js';
import { createNode } from '../src/repositories/nodes.js';
import { addApiKey } from '../src/repositories/api-keys.js';
import { createPostgresDatabase, TEST_DATABASE_URL } from './helpers/db.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';

describe.runIf(TEST_DATABASE_URL)('two servers on one PostgreSQL database', () => {
  let drop: () => Promise<void>;
  const dbs: Database[] = [];
  const apps: Awaited<ReturnType<typeof buildApp>>[] = [];

  beforeAll(async () => {
    const created = await createPostgresDatabase();
    drop = created.drop;
    for (let i = 0; i < 2; i++) {
      const db = openPostgres({ connectionString: created.url, max: 5 });
      if (i === 0) await migrate(db);
      dbs.push(db);
      apps.push(await buildApp({ db, verify: { enabled: false }, coordinator: { leaseTimeout: 0.5, sweepInterval: 0.1 } }));
    }
  });
  afterAll(async () => {
    for (const app of apps) await app.close();
    for (const db of dbs) await db.close();
    await drop?.();
  });

  it('wakes a worker waiting on one server the moment a job is submitted on the other, and the user waiting on the other hears the result', async () => {
    const [a, b] = apps as [typeof apps[0], typeof apps[0]];
    const worker = await new TestWorker(a, 'node-a', (await createNode(dbs[0]!, 'node-a')).key).start(['shared-model']);
    const user = new TestUser(b, (await addApiKey(dbs[1]!, 'user', 'app')).key);
    const started = Date.now();
    const waiting = worker.getJob(10);
    await new Promise((r) => setTimeout(r, 200));
    const jobId = await user.submit('shared-model');
    const job = (await waiting)!;
    expect(job.job_id).toBe(jobId);
    // Well before the poll's 10 s, and before the once-a-second recheck could have found it.
    expect(Date.now() - started).toBeLessThan(1_000);
    const result = user.result(jobId, 10);
    await new Promise((r) => setTimeout(r, 100));
    const reportedAt = Date.now();
    expect((await worker.report(job, 'from server a')).statusCode).toBe(200);
    const res = await result;
    expect(res.json()).toMatchObject({ status: 'success', result: { message: { content: 'from server a' } } });
    expect(Date.now() - reportedAt).toBeLessThan(500);
  });

  it('sweeps an expired lease once, though both servers sweep', async () => {
    const [a] = apps as [typeof apps[0]];
    const worker = await new TestWorker(a, 'node-slow', (await createNode(dbs[0]!, 'node-slow')).key).start(['swept-model']);
    const user = new TestUser(a, (await addApiKey(dbs[0]!, 'user', 'app-2')).key);
    const jobId = await user.submit('swept-model');
    expect((await worker.getJob())!.job_id).toBe(jobId);
    await new Promise((r) => setTimeout(r, 1_500));
    const [row] = await dbs[0]!.query<{ state: string; attempts: number; expired: number }>(sql('t_swept', `SELECT j.state, j.attempts,
      (SELECT count(*)::int FROM job_leases l WHERE l.job_id = j.id AND l.outcome = 'expired') AS expired FROM jobs j WHERE j.id = $1::uuid`), [jobId]);
    expect(row).toEqual({ state: 'queued', attempts: 1, expired: 1 });
  });
});
