// Attacks on the job lifecycle (issue "Hardening, round two", findings 3, 4, 5 and a low one),
// each performed against the real app on both backends: a node failing users' jobs by giving
// them up, a node writing into the next node's stream, a flood of partial output, a disabled
// node's job key.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { NO_RATE_LIMITS } from '../src/config.js';
import { setNodeDisabled } from '../src/nodes/lifecycle.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';

describe.each(backends)('lifecycle attacks on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let user: TestUser;
  let nodes = 0;

  beforeAll(async () => {
    // Verification on (give-up strikes are its), with no probes and no random copies.
    t = await startApp(backend, { coordinator: { maxAttempts: 3 }, verify: { enabled: true, probeInterval: 0, share: 0 } });
    user = new TestUser(t.app, await t.addUser());
  });
  afterAll(async () => {
    await t.close();
  });

  const worker = async (model: string, name = `node-${++nodes}`) => new TestWorker(t.app, name, await t.addNode(name)).start([model]);
  const q = <R>(name: string, text: string, values: unknown[] = []) => t.db.query<R>(sql(name, text), values);

  it("a node cannot fail a user's job by leasing and giving it up: no attempt is burned, and a second give-up shuts it out with a strike", async () => {
    const key = await t.addNode('quitter');
    const jobId = await user.submit('quit-model', 'please finish me');
    // register, get_job, deregister — four times, as the finding did.
    for (let i = 0; i < 4; i++) {
      const w = await new TestWorker(t.app, 'quitter', key).start(['quit-model']);
      const job = await w.getJob();
      if (i < 2) expect(job?.job_id).toBe(jobId);
      else expect(job).toBeNull();
      expect((await w.deregister()).statusCode).toBe(200);
    }
    const [job] = await q<{ state: string; failures: number }>('t_job', 'SELECT state, failures FROM jobs WHERE id = $1::uuid', [jobId]);
    expect(job).toEqual({ state: 'queued', failures: 0 });
    // Counted against the node: a strike of its own kind (the verifier records it, off the request path).
    await expect
      .poll(
        async () =>
          (await q<{ kind: string }>('t_strikes', "SELECT s.kind FROM node_strikes s JOIN nodes n ON n.id = s.node_id WHERE n.name = 'quitter'")).map(
            (s) => s.kind,
          ),
        { timeout: 10_000 },
      )
      .toEqual(['give_up']);
    // The job it is shut out of does not block the queue behind it: the node still gets the next job.
    const next = await user.submit('quit-model', 'the job behind it');
    const back = await new TestWorker(t.app, 'quitter', key).start(['quit-model']);
    expect((await back.getJob())?.job_id).toBe(next);
    expect((await back.deregister()).statusCode).toBe(200);
    // An honest node still gets the job and finishes it.
    const honest = await worker('quit-model');
    const got = (await honest.getJob())!;
    expect(got.job_id).toBe(jobId);
    expect((await honest.report(got)).statusCode).toBe(200);
    expect((await user.result(jobId)).json()).toMatchObject({ status: 'success' });
  });

  it("a node whose lease ended cannot write into the next node's stream", async () => {
    const first = await worker('inject-model');
    const jobId = await user.submit('inject-model', 'stream me', { stream: true });
    // The seed's submit_job has no stream field: mark the job streamed as the OpenAI API does.
    await q('t_stream', 'UPDATE jobs SET request = request || \'{"stream": true}\' WHERE id = $1::uuid', [jobId]);
    const a = (await first.getJob())!;
    expect((await first.post('/worker/job_progress', { job_id: jobId, api_key: a.api_key, delta: 'Hello ' })).statusCode).toBe(200);
    // Its lease ends without a report of its own (it gives the job back; the same holds for a lease that runs out).
    expect((await first.deregister()).statusCode).toBe(200);
    const second = await worker('inject-model');
    const b = (await second.getJob())!;
    expect((await first.post('/worker/job_progress', { job_id: jobId, api_key: a.api_key, delta: 'INJECTED' })).statusCode).toBe(400);
    expect((await second.post('/worker/job_progress', { job_id: jobId, api_key: b.api_key, delta: 'world' })).statusCode).toBe(200);
    const leases = await q<{ attempt: number; prefix: string; partial: string }>(
      't_leases',
      'SELECT attempt, prefix, partial FROM job_leases WHERE job_id = $1::uuid ORDER BY attempt',
      [jobId],
    );
    expect(leases).toEqual([
      { attempt: 1, prefix: '', partial: 'Hello ' },
      { attempt: 2, prefix: 'Hello ', partial: 'world' },
    ]);
  });

  it('partial output is bounded: a lease keeps at most 65,536 characters, and a job nobody streams keeps none', async () => {
    const w = await worker('flood-model');
    const jobId = await user.submit('flood-model', 'not streamed');
    const job = (await w.getJob())!;
    const piece = 'z'.repeat(60_000);
    for (let i = 0; i < 20; i++)
      expect((await w.post('/worker/job_progress', { job_id: jobId, api_key: job.api_key, delta: piece })).statusCode).toBe(200);
    expect(await q('t_partial', 'SELECT char_length(partial)::int AS n FROM job_leases WHERE job_id = $1::uuid', [jobId])).toEqual([{ n: 0 }]);
    await q('t_stream2', 'UPDATE jobs SET request = request || \'{"stream": true}\' WHERE id = $1::uuid', [jobId]);
    for (let i = 0; i < 20; i++)
      expect((await w.post('/worker/job_progress', { job_id: jobId, api_key: job.api_key, delta: piece })).statusCode).toBe(200);
    expect(await q('t_partial2', 'SELECT char_length(partial)::int AS n FROM job_leases WHERE job_id = $1::uuid', [jobId])).toEqual([{ n: 65_536 }]);
  });

  it('partial output is rate limited per job key', async () => {
    const db = await backend.open();
    const { buildApp } = await import('../src/app.js');
    const app = await buildApp({ db, verify: { enabled: false }, rateLimits: { ...NO_RATE_LIMITS, progressPerKey: 5 } });
    try {
      const { addApiKey } = await import('../src/nodes/api-keys.js');
      const { createNode } = await import('../src/nodes/lifecycle.js');
      const u = new TestUser(app, (await addApiKey(db, 'user', 'u')).key);
      const w = await new TestWorker(app, 'limited', (await createNode(db, 'limited')).key).start(['m']);
      const jobId = await u.submit('m');
      const job = (await w.getJob())!;
      const codes: number[] = [];
      for (let i = 0; i < 7; i++) codes.push((await w.post('/worker/job_progress', { job_id: jobId, api_key: job.api_key, delta: '' })).statusCode);
      expect(codes).toEqual([200, 200, 200, 200, 200, 429, 429]);
    } finally {
      await app.close();
      await db.close();
    }
  });

  it("a disabled node's job key earns nothing, and its leases go back to the queue", async () => {
    const w = await worker('disabled-model', 'to-disable');
    const jobId = await user.submit('disabled-model', 'work');
    const job = (await w.getJob())!;
    await setNodeDisabled(t.db, 'to-disable', true);
    const refused = await w.report(job);
    expect(refused.statusCode).toBe(400);
    expect(refused.json().detail).toMatch(/disabled/);
    expect(await q('t_results', 'SELECT count(*)::int AS n FROM job_results WHERE job_id = $1', [jobId])).toEqual([{ n: 0 }]);
    // The CLI (ins node disable) also ends its leases; here the lifecycle is asked as the CLI asks it.
    const [node] = await q<{ id: number }>('t_node', "SELECT id::int FROM nodes WHERE name = 'to-disable'");
    await t.app.service.coordinator.endNodeLeases(node!.id);
    expect(await q('t_state', 'SELECT state FROM jobs WHERE id = $1::uuid', [jobId])).toEqual([{ state: 'queued' }]);
  });

  it("a success without an answer (result.message neither text nor a message) is refused 400 and changes nothing; the job stays the node's to answer", async () => {
    const w = await worker('shapeless-model');
    const jobId = await user.submit('shapeless-model', 'answer me');
    const job = (await w.getJob())!;
    const send = (result: unknown) =>
      w.post('/worker/update_result', { job_id: job.job_id, api_key: job.api_key, model_name: job.model, status: 'success', result });
    for (const result of [{ message: 12345, foo: [1, 2, 3] }, {}, { message: null }, { message: { role: 'assistant' } }, { message: ['text'] }]) {
      const res = await send(result);
      expect(res.statusCode, JSON.stringify(result)).toBe(400);
      expect(res.json().detail).toMatch(/result\.message/);
    }
    expect(await q('t_shapeless', 'SELECT state FROM jobs WHERE id = $1::uuid', [jobId])).toEqual([{ state: 'leased' }]);
    expect(await q('t_shapeless_results', 'SELECT count(*)::int AS n FROM job_results WHERE job_id = $1', [jobId])).toEqual([{ n: 0 }]);
    // Its text, or a message with its text (empty too) or its tool calls, is an answer.
    expect((await send({ message: { role: 'assistant', content: '' } })).json()).toMatchObject({ status: 'success', points: 1 });
    expect((await user.result(jobId)).json()).toMatchObject({ status: 'success' });
  });
});
