// The job lifecycle (src/jobs/lifecycle.ts): every transition's outcome reaches every consumer,
// on the server whose statement made it and, through NOTIFY ins_jobs, on another server (two
// apps on one database). Table-driven over the transitions; each row acts through the wire
// where the wire can, and the consumers are checked by what they do: a waiting worker is handed
// the job (the dispatcher), a waiting get_result answers (the result watch), a heartbeat of a
// lease that ended is refused (the progress relay), the metrics count, and a recording consumer
// sees the outcome itself on both servers.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { startApp, type TestApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { buildApp } from '../src/app.js';
import type { Outcome } from '../src/jobs/outcome.js';
import { sql } from '../src/db/database.js';
import { randomUUID } from 'node:crypto';
import { Recorder } from './helpers/recorder.js';
import { sleep } from './helpers/wait.js';

const MODEL = 'life-model';

describe.each(backends)('job lifecycle on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let other: TestApp;
  const here = new Recorder<Outcome>();
  const there = new Recorder<Outcome>();
  let user: TestUser;
  let modelId: number;

  beforeAll(async () => {
    t = await startApp(backend, { coordinator: { sweepInterval: 0.05, maxAttempts: 2 } });
    // Another server on the same database.
    other = await buildApp({ db: t.db, verify: { enabled: false }, coordinator: { sweepInterval: 3600 } });
    t.app.service.coordinator.use(here);
    other.service.coordinator.use(there);
    user = new TestUser(t.app, await t.addUser());
    await user.submit(MODEL, 'the model exists');
    modelId = (await t.db.query<{ id: number }>(sql('t_model', 'SELECT id FROM models WHERE name = $1'), [MODEL]))[0]!.id;
    await t.db.query(sql('t_clear', 'DELETE FROM jobs'));
  });
  afterAll(async () => {
    await other.close();
    await t.close();
  });

  let workers = 0;
  const worker = async () => {
    const name = `life-${++workers}`;
    return new TestWorker(t.app, name, await t.addNode(name)).start([MODEL]);
  };
  let statements = 0;
  const q = (text: string, values: unknown[] = []) => t.db.query(sql(`t_q_${++statements}`, text), values);
  const metric = async (app: TestApp, state: string) =>
    Number(new RegExp(`ins_jobs_finished_total\\{state="${state}"\\} (\\d+)`).exec(await app.metrics.registry.metrics())?.[1] ?? 0);
  /** The outcome a row expects, seen here (local) and there (announced). */
  const both = async (from: { here: number; there: number }, match: (o: Outcome) => boolean) => {
    const a = await here.next((s) => s.local && match(s.outcome), from.here);
    const b = await there.next((s) => !s.local && match(s.outcome), from.there);
    return [a, b];
  };
  const mark = () => ({ here: here.seen.length, there: there.seen.length });
  const finished = (id: string, state: string) => (o: Outcome) => o.finished.get(id)?.state === state && o.finished.get(id)?.model !== undefined;
  const requeued = (id: string, attempt: number) => (o: Outcome) => o.requeuedLeases.get(id) === attempt && o.queued.get(modelId) === 1;

  const rows: { name: string; run: () => Promise<void> }[] = [
    {
      name: 'submit: queued, and a worker waiting on the other server is handed the job (dispatcher)',
      run: async () => {
        const w = await worker();
        const m = mark();
        const otherWorker = new TestWorker(other, w.node, '');
        otherWorker.token = w.token;
        const waiting = otherWorker.getJob(10);
        await sleep(0);
        const id = await user.submit(MODEL, 'queued');
        await both(m, (o) => o.queued.get(modelId) === 1);
        expect((await waiting)?.job_id).toBe(id);
      },
    },
    {
      name: 'submit with a hand-off: leased at once to the worker waiting here',
      run: async () => {
        const w = await worker();
        const waiting = w.getJob(10);
        // The worker's poll waits once its first look found nothing.
        await expect.poll(() => t.app.service.coordinator.waitingWorkers).toBe(1);
        const m = mark();
        const id = await user.submit(MODEL, 'handed');
        const seen = await here.next((s) => s.local && (s.outcome.local?.leased?.length ?? 0) > 0, m.here);
        expect(seen.outcome.queued.size).toBe(0);
        expect((await waiting)?.job_id).toBe(id);
      },
    },
    {
      name: 'complete (success): done, the waiting get_result answers on both servers, the metrics count it here',
      run: async () => {
        const w = await worker();
        const id = await user.submit(MODEL, 'to be done');
        const job = (await w.getJob())!;
        const waitingHere = user.result(id, 10);
        const waitingThere = new TestUser(other, user.key).result(id, 10);
        const before = await metric(t.app, 'done');
        const m = mark();
        expect((await w.report(job, 'the answer')).statusCode).toBe(200);
        const [a] = await both(m, finished(id, 'done'));
        expect(a!.outcome.local?.done?.get(id)?.result.message.content).toBe('the answer');
        expect((await waitingHere).json()).toMatchObject({ status: 'success', result: { message: { content: 'the answer' } } });
        expect((await waitingThere).json()).toMatchObject({ status: 'success', result: { message: { content: 'the answer' } } });
        expect(await metric(t.app, 'done')).toBe(before + 1);
        expect(await metric(other, 'done')).toBe(0);
      },
    },
    {
      name: 'complete (error): the lease ends, the job is queued again; its job key is refused from then on (progress relay)',
      run: async () => {
        const w = await worker();
        const id = await user.submit(MODEL, 'to fail once');
        const job = (await w.getJob())!;
        expect((await w.post('/worker/job_progress', { job_id: id, api_key: job.api_key, delta: '' })).statusCode).toBe(200);
        const m = mark();
        expect((await w.report(job, '', 'error')).statusCode).toBe(200);
        await both(m, requeued(id, 1));
        expect((await w.post('/worker/job_progress', { job_id: id, api_key: job.api_key, delta: '' })).statusCode).toBe(400);
        await q("UPDATE jobs SET state = 'canceled' WHERE id = $1", [id]);
      },
    },
    {
      name: 'complete (error, the last attempt): failed',
      run: async () => {
        // A node that failed a job does not get it back: two nodes fail it.
        const ws = [await worker(), await worker()];
        const id = await user.submit(MODEL, 'to fail twice');
        for (let i = 0; i < 2; i++) {
          const m = mark();
          const w = ws[i]!;
          const job = (await w.getJob())!;
          expect(job.job_id).toBe(id);
          expect((await w.report(job, '', 'error')).statusCode).toBe(200);
          if (i === 1) await both(m, finished(id, 'failed'));
        }
      },
    },
    {
      name: 'release (the worker deregisters): queued again, no failure of the job',
      run: async () => {
        const w = await worker();
        const id = await user.submit(MODEL, 'given back');
        await w.getJob();
        const m = mark();
        expect((await w.deregister()).statusCode).toBe(200);
        await both(m, requeued(id, 1));
        expect(await q('SELECT failures FROM jobs WHERE id = $1', [id])).toEqual([{ failures: 0 }]);
        await q("UPDATE jobs SET state = 'canceled' WHERE id = $1", [id]);
      },
    },
    {
      name: 'release (abandoned: a poll at capacity gives up the oldest lease)',
      run: async () => {
        const w = await worker();
        const id = await user.submit(MODEL, 'abandoned');
        await w.getJob();
        const next = await user.submit(MODEL, 'next');
        const m = mark();
        // The session holds one job: asking for another while a job waits gives up the one it holds.
        expect((await w.getJob())?.job_id).toBe(id);
        await both(m, (o) => o.requeuedLeases.get(id) === 1);
        await q("UPDATE job_leases SET ended_at = now(), outcome = 'released' WHERE job_id = $1 AND ended_at IS NULL", [id]);
        await q("UPDATE jobs SET state = 'canceled' WHERE id = ANY($1::uuid[])", [[id, next]]);
      },
    },
    {
      name: 'release (undelivered: the worker hung up before the job reached it)',
      run: async () => {
        const w = await worker();
        const id = await user.submit(MODEL, 'undelivered');
        expect((await w.getJob())?.job_id).toBe(id);
        const [lease] = await t.db.query<{ key_hash: string }>(
          sql('t_lease', 'SELECT key_hash FROM job_leases WHERE job_id = $1 AND ended_at IS NULL'),
          [id],
        );
        const m = mark();
        await t.app.service.coordinator.lifecycle.release({ keyHashes: [lease!.key_hash] }, 'released', true);
        await both(m, (o) => o.requeuedLeases.get(id) === 1 && o.queued.get(modelId) === 1);
        expect(await q('SELECT attempts FROM jobs WHERE id = $1', [id])).toEqual([{ attempts: 0 }]);
        await q("UPDATE jobs SET state = 'canceled' WHERE id = $1", [id]);
      },
    },
    {
      name: 'sweep (a lease ran out): queued again, one failure',
      run: async () => {
        const w = await worker();
        const id = await user.submit(MODEL, 'too slow');
        await w.getJob();
        const m = mark();
        await q("UPDATE job_leases SET expires_at = now() - interval '1 second' WHERE job_id = $1 AND ended_at IS NULL", [id]);
        const [a] = await both(m, requeued(id, 1));
        expect(a!.outcome.local?.leasesExpired).toBe(1);
        expect(await q('SELECT failures FROM jobs WHERE id = $1', [id])).toEqual([{ failures: 1 }]);
        await q("UPDATE jobs SET state = 'canceled' WHERE id = $1", [id]);
      },
    },
    {
      name: 'sweep (the deadline passed): expired, and the get_result waiting on the other server answers',
      run: async () => {
        const id = await user.submit('nobody-serves-this', 'too late');
        const waiting = new TestUser(other, user.key).result(id, 10);
        const m = mark();
        await q("UPDATE jobs SET deadline_at = now() - interval '1 second' WHERE id = $1", [id]);
        await both(m, finished(id, 'expired'));
        expect((await waiting).json()).toMatchObject({ status: 'expired' });
      },
    },
    {
      name: 'cancel (queued)',
      run: async () => {
        const id = await user.submit('nobody-serves-this', 'canceled while queued');
        const m = mark();
        const res = await t.app.inject({ method: 'POST', url: `/cancel_job/${id}`, headers: { api_key: user.key } });
        expect(res.json()).toEqual({ status: 'canceled', job_id: id, was: 'queued' });
        await both(m, finished(id, 'canceled'));
      },
    },
    {
      name: 'cancel (leased): the node is refused at its next progress and its report, and earns nothing',
      run: async () => {
        const w = await worker();
        const id = await user.submit(MODEL, 'canceled while leased');
        const job: Job = (await w.getJob())!;
        const m = mark();
        const res = await t.app.inject({ method: 'POST', url: `/cancel_job/${id}`, headers: { api_key: user.key } });
        expect(res.json()).toEqual({ status: 'canceled', job_id: id, was: 'leased' });
        await both(m, finished(id, 'canceled'));
        expect((await w.post('/worker/job_progress', { job_id: id, api_key: job.api_key, delta: 'more' })).statusCode).toBe(400);
        const late = await w.report(job);
        expect(late.statusCode).toBe(400);
        expect(late.json().detail).toMatch(/canceled/);
        expect(await q('SELECT count(*)::int AS n FROM job_results WHERE job_id = $1', [id])).toEqual([{ n: 0 }]);
      },
    },
    {
      name: "queue checks (verification's copies and probes): a waiting worker is offered them",
      run: async () => {
        const w = await worker();
        const lifecycle = t.app.service.coordinator.lifecycle;
        const m = mark();
        const outcome = await lifecycle.queueChecks(
          t.db,
          [{ kind: 'probe', id: randomUUID(), modelId, request: { messages: [{ role: 'user', content: 'probe' }], max_output: 0, temperature: 0 } }],
          60,
        );
        lifecycle.apply(outcome);
        await both(m, (o) => o.queued.get(modelId) === 1);
        expect((await w.getJob())?.messages).toEqual([{ role: 'user', content: 'probe' }]);
      },
    },
  ];

  it.each(rows)('$name', async ({ run }) => {
    await run();
  });
});
