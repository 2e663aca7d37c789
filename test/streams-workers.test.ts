// Streams that survive their node, and cancels that reach it, end to end: the official openai
// SDK streams a completion from a listening app, real `ins worker`s (in this process, and one
// as its own process to SIGKILL) run the job on test backends that speak Ollama's wire
// (test/helpers/backends.ts), and the first node fails mid-answer — its backend errs, its lease
// runs out while its backend hangs, its worker is killed. The next node continues the same
// answer: the client's text equals the job's recorded answer and ends with `stop`. A node that
// cannot continue and answers otherwise ends the stream with an error event. A canceled leased
// job's worker aborts its backend at once and is credited nothing.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser } from './helpers/coordinator.js';
import { answerOf, piecesOf, type FakeBackend } from './helpers/backends.js';
import { until } from './helpers/worker.js';
import { nodeMaker } from './helpers/network.js';
import { startWorkerProcess } from './helpers/process.js';

const PROMPT = 'tell me a story about the river and the old stone bridge at night';

describe.each(backends)('streams and cancels with ins worker on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let url: string;
  let key: string;
  let client: OpenAI;
  let user: TestUser;
  let nodes: ReturnType<typeof nodeMaker>;

  beforeAll(async () => {
    t = await startApp(backend, { coordinator: { sweepInterval: 0.05 } });
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    key = await t.addUser('app');
    client = new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
    user = new TestUser(t.app, key);
    nodes = nodeMaker(t, () => url);
  });
  afterAll(async () => {
    await nodes.close();
    await t.close();
  });

  const backendFor = (model: string) => nodes.backendFor(model);
  const workerOn = (b: FakeBackend, continueAnswers = true) => nodes.workerOn(b, continueAnswers);
  /** Streams a completion; `text` grows as the client reads; `done` is how it ended. */
  const stream = async (model: string) => {
    const s = await client.chat.completions.create({ model, messages: [{ role: 'user', content: PROMPT }], stream: true, temperature: 0 });
    const read = { id: '', text: '', done: undefined as unknown as Promise<{ finish: string | null; error: string | null }> };
    read.done = (async () => {
      let finish: string | null = null;
      try {
        for await (const c of s) {
          read.id = c.id.slice('chatcmpl-'.length);
          read.text += c.choices[0]?.delta.content ?? '';
          finish = c.choices[0]?.finish_reason ?? finish;
        }
      } catch (err) {
        return { finish, error: String((err as { code?: unknown }).code ?? err) };
      }
      return { finish, error: null };
    })();
    return read;
  };
  const recorded = async (jobId: string) =>
    ((await user.result(jobId)).json() as { result: { message: { content: string } } }).result.message.content;
  const expireLease = (jobId: string) =>
    t.db.query(sql('t_expire', "UPDATE job_leases SET expires_at = now() - interval '1 second' WHERE job_id = $1::uuid AND ended_at IS NULL"), [
      jobId,
    ]);

  /** The first node has streamed three pieces of the answer to the client, then its backend waits. */
  async function firstNodeStreaming(model: string) {
    const whole = answerOf(model, [{ content: PROMPT }]);
    const begun = piecesOf(whole).slice(0, 3).join('');
    const read = await stream(model);
    await until('the client to read the first pieces', () => read.text === begun);
    return { whole, begun, read };
  }

  it("continues the answer on another node after the first one's backend fails mid-answer", async () => {
    const model = 'story-backend-error';
    const first = await backendFor(model);
    first.pauseAfter = 3;
    first.failAfter = 3;
    await workerOn(first);
    const { whole, read } = await firstNodeStreaming(model);
    await workerOn(await backendFor(model));
    first.resume();
    expect(await read.done).toEqual({ finish: 'stop', error: null });
    expect(read.text).toBe(whole);
    expect(await recorded(read.id)).toBe(whole);
  });

  it("continues the answer after the first node's lease runs out while its backend hangs; that node stops at its next heartbeat", async () => {
    const model = 'story-expiry';
    const first = await backendFor(model);
    first.stallAfter = 3;
    const stalled = await workerOn(first);
    const { whole, read } = await firstNodeStreaming(model);
    await workerOn(await backendFor(model));
    await expireLease(read.id);
    expect(await read.done).toEqual({ finish: 'stop', error: null });
    expect(read.text).toBe(whole);
    expect(await recorded(read.id)).toBe(whole);
    await until('the first worker to abort its backend', () => first.hungUp > 0 && stalled.outcomes.some((o) => o.outcome === 'canceled'));
  });

  it("continues the answer after the first node's worker is killed (SIGKILL) and its lease runs out", async () => {
    const model = 'story-killed';
    const first = await backendFor(model);
    first.pauseAfter = 3;
    const node = nodes.nextNode();
    const killed = startWorkerProcess([
      '--server',
      url,
      '--node',
      node,
      '--key',
      await t.addNode(node),
      '--backend',
      'ollama',
      '--backend-url',
      first.url,
    ]);
    await until('the worker process to declare its models', () => killed.logs().includes('models declared'), 60_000);
    const { whole, read } = await firstNodeStreaming(model);
    killed.child.kill('SIGKILL');
    await killed.exited;
    await workerOn(await backendFor(model));
    await expireLease(read.id);
    expect(await read.done).toEqual({ finish: 'stop', error: null });
    expect(read.text).toBe(whole);
    expect(await recorded(read.id)).toBe(whole);
  });

  it('ends the stream with an error event when the node that finishes the job answered afresh, otherwise', async () => {
    const model = 'story-afresh';
    const first = await backendFor(model);
    first.pauseAfter = 3;
    first.failAfter = 3;
    await workerOn(first);
    const { begun, read } = await firstNodeStreaming(model);
    const other = await backendFor(model);
    other.answer = () => 'A different story altogether.';
    await workerOn(other, false);
    first.resume();
    expect(await read.done).toEqual({ finish: null, error: 'answer_diverged' });
    expect(read.text).toBe(begun);
    expect(await recorded(read.id)).toBe('A different story altogether.');
  });

  it("cancels a leased job: its worker aborts the backend at once, reports nothing and earns nothing; the client's stream ends", async () => {
    const model = 'story-canceled';
    const first = await backendFor(model);
    first.pauseAfter = 3;
    const w = await workerOn(first);
    const { read } = await firstNodeStreaming(model);
    const canceled = await t.app.inject({ method: 'POST', url: `/cancel_job/${read.id}`, headers: { authorization: `Bearer ${key}` } });
    expect(canceled.json()).toEqual({ status: 'canceled', job_id: read.id, was: 'leased' });
    expect((await read.done).error).toBe('canceled');
    await until('the worker to abort its backend', () => first.hungUp > 0 && w.outcomes.some((o) => o.outcome === 'canceled'));
    expect(await t.db.query(sql('t_credit', 'SELECT count(*)::int AS n FROM job_results WHERE job_id = $1'), [read.id])).toEqual([{ n: 0 }]);
    expect((await user.result(read.id)).json()).toMatchObject({ status: 'canceled' });
    expect(await t.app.metrics.registry.metrics()).toMatch(/ins_jobs_finished_total\{state="canceled"\} [1-9]/);
  });

  it('cancels a queued job: nobody runs it', async () => {
    const jobId = await user.submit('nobody-serves-it', 'never mind');
    const canceled = await t.app.inject({ method: 'POST', url: `/cancel_job/${jobId}`, headers: { api_key: key } });
    expect(canceled.json()).toEqual({ status: 'canceled', job_id: jobId, was: 'queued' });
    expect((await t.app.inject({ method: 'POST', url: `/cancel_job/${jobId}`, headers: { api_key: key } })).json()).toMatchObject({
      was: 'canceled',
    });
    expect((await user.result(jobId)).json()).toMatchObject({ status: 'canceled', result: { message: { content: '' } } });
  });
});
