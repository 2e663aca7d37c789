// The seed's clients poll GET /get_result every few seconds until it stops answering 404: a
// poll of a job this server knows is open is answered from memory (src/jobs/open-jobs.ts),
// with where the job stands; a job finished on another server is seen as soon as that server's
// announcement arrives; a job the server does not know is read (once). Two apps on one database
// play two servers.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { startApp, type TestApp } from './helpers/app.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';
import { buildApp } from '../src/app.js';
import type { Outcome } from '../src/jobs/outcome.js';

describe.each(backends)('pending polls on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let other: TestApp;
  let user: TestUser;
  let elsewhere: TestUser;
  const statements: string[] = [];

  beforeAll(async () => {
    t = await startApp(backend);
    other = await buildApp({ db: t.db, verify: { enabled: false } });
    const key = await t.addUser('poller');
    user = new TestUser(t.app, key);
    elsewhere = new TestUser(other, key);
    t.db.observeStatements((name) => statements.push(name));
  });
  afterAll(async () => {
    await other.close();
    await t.close();
  });

  /** Statements run while `f` runs, but the background ones (sweeps, presence, the standing refresh). */
  async function statementsOf(f: () => Promise<unknown>): Promise<string[]> {
    const from = statements.length;
    await f();
    return statements.slice(from).filter((n) => !['sweep_try_lock', 'sweep', 'sessions_touch', 'jobs_standings', 'jobs_queued_models'].includes(n));
  }

  it('answers polls of a job submitted here from memory: 404 with its state, and no statement', async () => {
    const jobId = await user.submit('poll-model', 'wait for it');
    await user.result(jobId); // the key is looked up once, then cached
    const polls: { status: number; body: Record<string, unknown> }[] = [];
    const ran = await statementsOf(async () => {
      for (let i = 0; i < 5; i++) {
        const r = await user.result(jobId);
        polls.push({ status: r.statusCode, body: r.json() });
      }
    });
    expect(ran).toEqual([]);
    for (const p of polls) expect(p).toMatchObject({ status: 404, body: { detail: 'Job not finished', state: 'queued' } });
    expect(Number(/ins_pending_polls_total\{source="memory"\} (\d+)/.exec(await t.app.metrics.registry.metrics())?.[1])).toBeGreaterThanOrEqual(5);
  });

  it('reads a job it does not know once, then answers from memory; the position comes within a second', async () => {
    const ahead = await user.submit('queue-model', 'first');
    const jobId = await user.submit('queue-model', 'second');
    // The other server never saw these jobs: its first poll reads, the next ones do not.
    const first = await statementsOf(() => elsewhere.result(jobId));
    expect(first).toContain('jobs_own');
    const next = await statementsOf(() => elsewhere.result(jobId));
    expect(next).toEqual([]);
    await expect
      .poll(async () => (await elsewhere.result(jobId)).json(), { timeout: 10_000 })
      .toEqual({ detail: 'Job not finished', state: 'queued', position: 1, eta_seconds: null });
    expect(ahead).not.toBe(jobId);
  });

  it('sees a job finished on the other server as soon as its announcement arrives', async () => {
    const w = await new TestWorker(other, 'far-node', await t.addNode('far-node')).start(['far-model']);
    const jobId = await user.submit('far-model', 'done elsewhere');
    expect((await user.result(jobId)).statusCode).toBe(404);
    let heard!: () => void;
    const announced = new Promise<void>((r) => (heard = r));
    t.app.service.coordinator.use({
      apply: (o: Outcome) => {
        if (o.finished.has(jobId)) heard();
      },
    });
    const job = (await w.getJob())!;
    expect((await w.report(job, 'from far away')).statusCode).toBe(200);
    await announced;
    expect((await user.result(jobId)).json()).toMatchObject({ status: 'success', result: { message: { content: 'from far away' } } });
  });

  it('answers the poll that ends the wait from memory when the job was done here; later reads read it', async () => {
    const w = await new TestWorker(t.app, 'memory-node', await t.addNode('memory-node')).start(['memory-model']);
    const jobId = await user.submit('memory-model', 'answer me');
    expect((await user.result(jobId)).statusCode).toBe(404);
    const job = (await w.getJob())!;
    expect((await w.report(job, 'from memory')).statusCode).toBe(200);
    let first!: { statusCode: number; json: () => unknown };
    const ran = await statementsOf(async () => {
      first = await user.result(jobId);
    });
    expect(ran).toEqual([]);
    expect(first.statusCode).toBe(200);
    expect(first.json()).toEqual({ status: 'success', job_id: jobId, result: { message: { role: 'assistant', content: 'from memory' } } });
    // Taken once: the next read reads the job, and says the same.
    let again!: { statusCode: number; json: () => unknown };
    expect(
      await statementsOf(async () => {
        again = await user.result(jobId);
      }),
    ).toContain('jobs_own');
    expect(again.json()).toEqual(first.json());
    const metrics = await t.app.metrics.registry.metrics();
    expect(Number(/ins_finished_polls_total\{source="memory"\} (\d+)/.exec(metrics)?.[1])).toBeGreaterThanOrEqual(1);
    expect(Number(/ins_finished_polls_total\{source="database"\} (\d+)/.exec(metrics)?.[1])).toBeGreaterThanOrEqual(1);
  });

  it('keeps no answer for another key, nor for a job nobody polled', async () => {
    const w = await new TestWorker(t.app, 'quiet-node', await t.addNode('quiet-node')).start(['quiet-model']);
    const stranger = new TestUser(t.app, await t.addUser('stranger'));
    const polled = await user.submit('quiet-model', 'polled');
    expect((await user.result(polled)).statusCode).toBe(404);
    const unpolled = await user.submit('quiet-model', 'not polled');
    const kept = t.app.service.coordinator.keptAnswers;
    for (let i = 0; i < 2; i++) {
      const job = (await w.getJob())!;
      expect((await w.report(job, `answer ${i}`)).statusCode).toBe(200);
    }
    expect(t.app.service.coordinator.keptAnswers).toBe(kept + 1);
    // Another user's poll of the job is a 404 and leaves the owner's answer where it is.
    expect((await stranger.result(polled)).statusCode).toBe(404);
    expect(
      await statementsOf(async () => {
        expect((await user.result(polled)).statusCode).toBe(200);
      }),
    ).toEqual([]);
    expect(
      await statementsOf(async () => {
        expect((await user.result(unpolled)).statusCode).toBe(200);
      }),
    ).toContain('jobs_own');
  });

  it('waits (get_result with wait) for a job it knows without reading it, woken with the answer; a job it does not know is read', async () => {
    const w = await new TestWorker(t.app, 'waited-node', await t.addNode('waited-node')).start(['waited-model']);
    const jobId = await user.submit('waited-model', 'wait here');
    const kept = t.app.service.coordinator.keptAnswers;
    let answer!: { statusCode: number; json: () => unknown };
    const ran = await statementsOf(async () => {
      const waiting = user.result(jobId, 30);
      // The wait is registered before the lease, so the report wakes it.
      await expect.poll(() => t.app.service.coordinator.waitingResults).toBe(1);
      const job = (await w.getJob())!;
      expect((await w.report(job, 'woken')).statusCode).toBe(200);
      answer = await waiting;
    });
    expect(answer.statusCode).toBe(200);
    expect(answer.json()).toEqual({ status: 'success', job_id: jobId, result: { message: { role: 'assistant', content: 'woken' } } });
    expect(ran).not.toContain('jobs_own');
    // Nothing is kept for a poll: the waiter had the answer.
    expect(t.app.service.coordinator.keptAnswers).toBe(kept);
    // The other server never saw the job: its wait reads it, final already, and answers at once.
    expect(
      await statementsOf(async () => {
        expect((await elsewhere.result(jobId, 30)).json()).toEqual(answer.json());
      }),
    ).toContain('jobs_own');
  });

  it('tells a leased job apart, and kirabot-style polling ends with the result', async () => {
    const w = await new TestWorker(t.app, 'near-node', await t.addNode('near-node')).start(['near-model']);
    const jobId = await user.submit('near-model', 'lease me');
    const job = (await w.getJob())!;
    await expect
      .poll(async () => (await user.result(jobId)).json(), { timeout: 10_000 })
      .toMatchObject({ state: 'leased', position: 0, eta_seconds: 0 });
    expect((await w.report(job, 'here it is')).statusCode).toBe(200);
    // As the seed's client does: poll until the status is not 404, then read the message.
    let res = await user.result(jobId);
    while (res.statusCode === 404) res = await user.result(jobId);
    expect(res.statusCode).toBe(200);
    expect(res.json().result.message.content).toBe('here it is');
  });
});
