// Two servers on one PostgreSQL database, as a deployment runs them: a worker long-polling on
// one is woken by the announcement of a job submitted on the other (NOTIFY ins_jobs), a user
// waiting on one hears the result reported on the other (the same channel), and an expired
// lease is swept once whichever server gets there first.
import { describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { sql } from '../src/db/database.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { addApiKey } from '../src/nodes/api-keys.js';
import { TEST_DATABASE_URL } from './helpers/db.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';
import { twoServers } from './helpers/two-servers.js';
import type { Outcome } from '../src/jobs/outcome.js';

/** Resolves with the first outcome another server announced to `app` that matches. */
function announced(app: Awaited<ReturnType<typeof buildApp>>, match: (o: Outcome) => boolean): Promise<Outcome> {
  return new Promise((resolve) =>
    app.service.coordinator.use({
      apply: (o, local) => {
        if (!local && match(o)) resolve(o);
      },
    }),
  );
}

describe.runIf(TEST_DATABASE_URL)('two servers on one PostgreSQL database', () => {
  const { dbs, apps } = twoServers({ pool: 5, app: { verify: { enabled: false }, coordinator: { sweepInterval: 0.1 } } });

  it('wakes a worker waiting on one server when a job is submitted on the other, and the user waiting on the other hears the result', async () => {
    const [a, b] = apps as [(typeof apps)[0], (typeof apps)[0]];
    const worker = await new TestWorker(a, 'node-a', (await createNode(dbs[0]!, 'node-a')).key).start(['shared-model']);
    const user = new TestUser(b, (await addApiKey(dbs[1]!, 'user', 'app')).key);
    const waiting = worker.getJob(30);
    await expect.poll(() => a.service.coordinator.waitingWorkers).toBe(1);
    const queuedThere = announced(a, (o) => o.queued.size > 0);
    const jobId = await user.submit('shared-model');
    await queuedThere;
    const job = (await waiting)!;
    expect(job.job_id).toBe(jobId);
    const result = user.result(jobId, 30);
    const finishedThere = announced(b, (o) => o.finished.get(jobId)?.state === 'done');
    expect((await worker.report(job, 'from server a')).statusCode).toBe(200);
    await finishedThere;
    const res = await result;
    expect(res.json()).toMatchObject({ status: 'success', result: { message: { content: 'from server a' } } });
  });

  it('wakes waiters whose job finished on the other server while this one did not listen, and no other', async () => {
    const [a, b] = apps as [(typeof apps)[0], (typeof apps)[0]];
    const one = await new TestWorker(a, 'node-deaf-1', (await createNode(dbs[0]!, 'node-deaf-1')).key).start(['deaf-model']);
    const two = await new TestWorker(a, 'node-deaf-2', (await createNode(dbs[0]!, 'node-deaf-2')).key).start(['deaf-model']);
    const user = new TestUser(b, (await addApiKey(dbs[1]!, 'user', 'app-deaf')).key);
    const done = await user.submit('deaf-model', 'finished while b is deaf');
    const open = await user.submit('deaf-model', 'still open when b hears again');
    const first = (await one.getJob())!;
    const second = (await two.getJob())!;
    expect([first.job_id, second.job_id].sort()).toEqual([done, open].sort());
    const job = (j: string) => (first.job_id === j ? first : second);
    const worker = { report: (j: typeof first, content: string) => (j === first ? one : two).report(j, content) };
    const waitingDone = user.result(done, 30);
    const waitingOpen = user.result(open, 30);
    let live!: (v: boolean) => void;
    const changes: boolean[] = [];
    const heard = (want: boolean) =>
      new Promise<void>((r) => {
        live = (v) => {
          changes.push(v);
          if (v === want) r();
        };
      });
    b.service.coordinator.use({ apply: () => {}, setLive: (v) => live?.(v) });
    // b's LISTEN connection is cut: the announcement of the report below cannot reach it.
    const deaf = heard(false);
    await dbs[0]!.query(
      sql('t_cut', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'"),
    );
    await deaf;
    const hearing = heard(true);
    expect((await worker.report(job(done), 'while b was deaf')).statusCode).toBe(200);
    await hearing;
    expect((await waitingDone).json()).toMatchObject({ status: 'success', result: { message: { content: 'while b was deaf' } } });
    // The other waiter is not woken for nothing: it answers when its job is done.
    expect((await worker.report(job(open), 'later')).statusCode).toBe(200);
    expect((await waitingOpen).json()).toMatchObject({ status: 'success', result: { message: { content: 'later' } } });
  });

  it('sweeps an expired lease once, though both servers sweep', async () => {
    const [a] = apps as [(typeof apps)[0]];
    const worker = await new TestWorker(a, 'node-slow', (await createNode(dbs[0]!, 'node-slow')).key).start(['swept-model']);
    const user = new TestUser(a, (await addApiKey(dbs[0]!, 'user', 'app-2')).key);
    const jobId = await user.submit('swept-model');
    expect((await worker.getJob())!.job_id).toBe(jobId);
    // Its time is up (as if LEASE_TIMEOUT had passed).
    await dbs[0]!.query(sql('t_expire', "UPDATE job_leases SET expires_at = now() - interval '1 second' WHERE job_id = $1::uuid"), [jobId]);
    const swept = () =>
      dbs[0]!.query<{ state: string; attempts: number; expired: number }>(
        sql(
          't_swept',
          `SELECT j.state, j.attempts,
      (SELECT count(*)::int FROM job_leases l WHERE l.job_id = j.id AND l.outcome = 'expired') AS expired FROM jobs j WHERE j.id = $1::uuid`,
        ),
        [jobId],
      );
    await expect.poll(async () => (await swept())[0]?.state, { timeout: 30_000 }).toBe('queued');
    // Both servers sweep: the lease ended once, whoever got there first.
    expect((await swept())[0]).toEqual({ state: 'queued', attempts: 1, expired: 1 });
  });
});
