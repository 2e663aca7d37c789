// `ins worker` (in this process) against the real app, on both database backends, through a
// proxy that records what the worker sends (test/helpers/tap.ts):
// - a job that comes with `answer_prefix` (an earlier node failed mid-answer; the proxy adds
//   it, as the coordinator does) is continued on each backend that can: only the continuation
//   goes out as progress, the report carries the whole answer and the worker's own usage (a
//   tools conversation is continued as itself, its calls and tool answers kept);
//   a backend that cannot continue runs it from the start and relays only what follows the
//   prefix while its answer matches it; a backend that refuses the continuation is asked again
//   from the start; a backend failing mid-answer leaves what was relayed, and the job is
//   reported as an error.
// - every running job sends job_progress at least every second, streamed or not; once the
//   coordinator answers 400 (the lease has ended: here the worker's session is ended by
//   another call and the job finished by another node) the backend request is aborted — the
//   backend sees its client hang up —, the job is not reported, and the slot takes the next job.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';
import { answerOf, piecesOf, startFakeBackend, words, type FakeBackend, type FakeKind } from './helpers/backends.js';
import { startTap, type Tap } from './helpers/tap.js';
import { startWorker, until, type InProcessWorker } from './helpers/worker.js';
import type { BackendKind } from '../src/worker/options.js';

const PROMPT = 'tell me a story about the river and the old stone bridge';

describe.each(backends)('ins worker and the coordinator ($name)', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let url: string;
  let tap: Tap;
  let user: TestUser;
  const fakes: FakeBackend[] = [];
  const workers: InProcessWorker[] = [];
  let n = 0;

  beforeAll(async () => {
    t = await startApp(backend);
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    tap = await startTap(url);
    user = new TestUser(t.app, await t.addUser());
  });
  afterAll(async () => {
    for (const w of workers) await w.stop();
    for (const b of fakes) await b.close();
    await tap.close();
    await t.close();
  });

  /** A fresh model, a backend of `kind` serving it, and a worker (through the tap) on it. */
  const setUp = async (kind: FakeKind, flag: BackendKind = kind === 'ollama' ? 'ollama' : 'openai') => {
    const model = `model-${++n}`;
    const next = `${model}-next`;
    const b = await startFakeBackend(kind, [model, next]);
    fakes.push(b);
    const node = `node-${n}`;
    const w = await startWorker({ server: tap.url, node, key: await t.addNode(node), backend: flag, backendUrl: b.url });
    workers.push(w);
    return { model, next, node, b, w };
  };
  const result = (jobId: string) =>
    user.resultWhenDone<{ status: string; result: { message: { content: string } }; usage?: { prompt_tokens?: number; completion_tokens?: number } }>(
      jobId,
    );
  const progressOf = (jobId: string) => tap.progress.filter((p) => p.job_id === jobId);
  const relayed = (jobId: string) =>
    progressOf(jobId)
      .map((p) => p.delta)
      .join('');
  // The backend holds the end of its answer until the worker relayed `text` (whatever is still
  // pending when an answer ends is not sent: the report carries it).
  const relays = async (b: FakeBackend, jobId: string, text: string) => {
    await until(`the worker to relay ${JSON.stringify(text)}`, () => relayed(jobId) === text);
    b.resume();
  };

  describe('a job whose answer an earlier attempt began', () => {
    for (const kind of ['ollama', 'vllm', 'llamacpp'] as const) {
      it(`${kind}: continues it, streams only the continuation, reports the whole answer with its own usage`, async () => {
        const { model, b } = await setUp(kind);
        const whole = answerOf(model, [{ content: PROMPT }]);
        const prefix = piecesOf(whole).slice(0, 4).join('');
        const rest = whole.slice(prefix.length);
        b.pauseAfter = piecesOf(rest).length;
        tap.jobData = () => ({ stream: true, answer_prefix: prefix });
        const jobId = await user.submit(model, PROMPT);
        await relays(b, jobId, rest);
        const done = await result(jobId);
        expect(done.result.message.content).toBe(whole);
        expect(done.usage).toEqual({ prompt_tokens: words(PROMPT) + words(prefix), completion_tokens: words(rest) });
        expect(relayed(jobId)).toBe(rest);
        expect(progressOf(jobId).every((p) => p.status === 200)).toBe(true);
        expect(b.requests.at(-1)!.messages).toEqual([
          { role: 'user', content: PROMPT },
          { role: 'assistant', content: prefix },
        ]);
        // Not streamed: the same whole answer, and heartbeats only.
        b.pauseAfter = undefined;
        tap.jobData = () => ({ answer_prefix: prefix });
        const quiet = await user.submit(model, PROMPT);
        expect((await result(quiet)).result.message.content).toBe(whole);
        expect(progressOf(quiet).every((p) => p.delta === '')).toBe(true);
        tap.jobData = undefined;
      });
    }

    for (const kind of ['ollama', 'vllm'] as const) {
      it(`${kind}: asks the backend for what is left of max_output once the prefix is counted (a token per four bytes)`, async () => {
        const { model, b } = await setUp(kind);
        const whole = answerOf(model, [{ content: PROMPT }]);
        const prefix = piecesOf(whole).slice(0, 4).join('');
        tap.jobData = () => ({ answer_prefix: prefix });
        const jobId = await user.submit(model, PROMPT, { max_output: 100 });
        expect((await result(jobId)).status).toBe('success');
        const sent = b.requests.at(-1)! as { options?: { num_predict?: number }; max_tokens?: number };
        expect(kind === 'ollama' ? sent.options?.num_predict : sent.max_tokens).toBe(100 - Math.ceil(Buffer.byteLength(prefix) / 4));
        tap.jobData = undefined;
      });
    }

    for (const kind of ['ollama', 'vllm'] as const) {
      it(`${kind}: a tools conversation is continued as itself — the assistant's call and the tool's answer kept, the prefix last`, async () => {
        const { model, b } = await setUp(kind);
        const question = 'what is the weather in Paris today?';
        const conversation = [
          { role: 'user', content: question },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } }],
          },
          { role: 'tool', tool_call_id: 'call_1', content: 'sunny and mild all afternoon' },
        ];
        const whole = answerOf(model, [{ content: 'sunny and mild all afternoon' }]);
        const prefix = piecesOf(whole).slice(0, 3).join('');
        // As the coordinator sends a /v1 job to a node that declared capabilities: the
        // conversation whole in params.messages (docs/openai.md), here with an earlier attempt's text.
        tap.jobData = () => ({ answer_prefix: prefix, params: { messages: conversation } });
        const jobId = await user.submit(model, question);
        expect((await result(jobId)).result.message.content).toBe(whole);
        const sent = b.requests.at(-1)!.messages;
        expect(sent).toEqual([
          ...(kind === 'ollama'
            ? [
                { role: 'user', content: question },
                { role: 'assistant', content: '', tool_calls: [{ function: { name: 'weather', arguments: { city: 'Paris' } } }] },
                { role: 'tool', content: 'sunny and mild all afternoon', tool_name: 'weather' },
              ]
            : conversation),
          { role: 'assistant', content: prefix },
        ]);
        tap.jobData = undefined;
      });
    }

    it('a backend that cannot continue runs it from the start, relaying only what follows the prefix while it matches', async () => {
      const { model, b, w } = await setUp('openai');
      expect(w.logs.some((l) => l.includes('backend: an OpenAI-compatible server; runs answers another node began from the start'))).toBe(true);
      const whole = answerOf(model, [{ content: PROMPT }]);
      const prefix = piecesOf(whole).slice(0, 4).join('');
      b.pauseAfter = piecesOf(whole).length;
      tap.jobData = () => ({ stream: true, answer_prefix: prefix });
      const same = await user.submit(model, PROMPT);
      await relays(b, same, whole.slice(prefix.length));
      expect((await result(same)).result.message.content).toBe(whole);
      expect(b.requests.at(-1)!.messages).toEqual([{ role: 'user', content: PROMPT }]);
      // Its new answer does not begin as the client's did: nothing is relayed (two more calls
      // after the whole answer was generated carry no text), the report says what it has.
      tap.jobData = () => ({ stream: true, answer_prefix: 'Once upon a time ' });
      const other = await user.submit(model, PROMPT);
      await until('the answer to be generated', () => b.paused === 2);
      const calls = progressOf(other).length;
      await until('two more progress calls', () => progressOf(other).length >= calls + 2);
      b.resume();
      expect((await result(other)).result.message.content).toBe(whole);
      expect(relayed(other)).toBe('');
      tap.jobData = undefined;
    });

    it('a backend that refuses the continuation (llama.cpp and a thinking model) is asked again from the start', async () => {
      const { model, b, w } = await setUp('llamacpp');
      b.rejectPrefill = true;
      const whole = answerOf(model, [{ content: PROMPT }]);
      const prefix = piecesOf(whole).slice(0, 2).join('');
      b.pauseAfter = piecesOf(whole).length;
      tap.jobData = () => ({ stream: true, answer_prefix: prefix });
      const jobId = await user.submit(model, PROMPT);
      await relays(b, jobId, whole.slice(prefix.length));
      expect((await result(jobId)).result.message.content).toBe(whole);
      expect(w.logs.some((l) => l.includes('the backend would not continue the answer'))).toBe(true);
      tap.jobData = undefined;
    });
  });

  it('a backend failing mid-answer: what reached the client stays relayed, the job is reported as an error and runs again on another node', async () => {
    const { model, b, w } = await setUp('vllm');
    const pieces = piecesOf(answerOf(model, [{ content: PROMPT }]));
    // The first three pieces reach the coordinator, then the backend's connection is cut.
    b.pauseAfter = 3;
    b.failAfter = 3;
    tap.jobData = () => ({ stream: true });
    const jobId = await user.submit(model, PROMPT);
    await until('the worker to relay the first pieces', () => relayed(jobId) === pieces.slice(0, 3).join(''));
    // A node that failed a job does not get it back (docs/coordinator.md): another node serving
    // the model, online before the failure, runs it again.
    const other = await startFakeBackend('vllm', [model]);
    fakes.push(other);
    const node = `node-${n}-other`;
    workers.push(await startWorker({ server: tap.url, node, key: await t.addNode(node), backend: 'openai', backendUrl: other.url }));
    b.resume();
    await until('the backend to fail', () => b.hungUp === 1);
    b.pauseAfter = undefined;
    b.failAfter = undefined;
    await until('the error report', () => tap.reports.some((r) => r.job_id === jobId));
    expect(tap.reports.find((r) => r.job_id === jobId)).toMatchObject({ content: '', status: 200 });
    await until('the worker to see its error report answered', () => w.outcomes.some((o) => o.job.job_id === jobId && o.outcome === 'error'));
    // Back in the queue, it is done once the backend answers again.
    expect((await result(jobId)).result.message.content).toBe(pieces.join(''));
    tap.jobData = undefined;
  });

  describe('a job whose lease ends while it runs', () => {
    for (const streamed of [false, true]) {
      it(`${streamed ? 'streamed' : 'not streamed'}: heartbeats until the coordinator answers 400, then the backend request is cut, nothing is reported, and the slot takes the next job`, async () => {
        const { model, next, node, b, w } = await setUp('ollama');
        b.stallAfter = streamed ? 2 : 0;
        tap.jobData = streamed ? () => ({ stream: true }) : undefined;
        const jobId = await user.submit(model, PROMPT);
        await until('the backend to get the job', () => b.calls === 1);
        // Heartbeats while it runs, streamed or not (after its text: a streamed job's stream opens with an empty line).
        if (streamed) await until('the first pieces', () => progressOf(jobId).filter((p) => p.delta !== '').length === 2);
        await until('a heartbeat', () => {
          const pieces = progressOf(jobId);
          const lastText = pieces.map((p) => p.delta !== '').lastIndexOf(true);
          return pieces.some((p, i) => i > lastText && p.delta === '' && p.status === 200);
        });
        if (streamed)
          expect(
            progressOf(jobId)
              .map((p) => p.delta)
              .join(''),
          ).toBe(
            piecesOf(answerOf(model, [{ content: PROMPT }]))
              .slice(0, 2)
              .join(''),
          );
        // The job's model leaves this backend (so that the worker, registering again, cannot take it back) …
        b.models.splice(b.models.indexOf(model), 1);
        // … its session is ended by another call (its lease goes back to the queue) …
        const gone = await t.app.inject({
          method: 'POST',
          url: '/worker/deregister_node',
          headers: { authorization: `Bearer ${w.worker.client.token}` },
          payload: { node_url: node },
        });
        expect(gone.statusCode).toBe(200);
        // … and another node runs it.
        const other = await new TestWorker(t.app, `other-${n}`, await t.addNode(`other-${n}`)).start([model]);
        const job = await other.getJob(10);
        expect(job?.job_id).toBe(jobId);
        expect((await other.report(job!, "the other node's answer")).statusCode).toBe(200);
        await until('the backend to see its client hang up', () => b.hungUp === 1);
        expect(progressOf(jobId).at(-1)!.status).toBe(400);
        expect(w.outcomes.find((o) => o.job.job_id === jobId)?.outcome).toBe('canceled');
        expect(w.worker.jobsCanceled).toBe(1);
        expect(w.logs.some((l) => l.includes(`job ${jobId}: the lease ended`))).toBe(true);
        expect(tap.reports.filter((r) => r.job_id === jobId)).toEqual([]);
        expect((await result(jobId)).result.message.content).toBe("the other node's answer");
        // The slot takes its next job (after registering again: its session was ended).
        b.stallAfter = undefined;
        tap.jobData = undefined;
        const second = await user.submit(next, 'and then?');
        expect((await result(second)).result.message.content).toBe(answerOf(next, [{ content: 'and then?' }]));
        await until('the worker to see its report answered', () => w.outcomes.some((o) => o.job.job_id === second && o.outcome === 'success'));
      });
    }
  });
});
