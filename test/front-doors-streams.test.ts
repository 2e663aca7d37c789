// Issue 54: the guarantees of a stream hold on every front door, since all run through one core
// (src/routes/front/run.ts): Anthropic's Messages and OpenAI's Responses streams, read raw as
// server-sent events, through real `ins worker`s on test backends (test/helpers/backends.ts).
// A node failing mid-answer is continued by the next one without a garbled stream (the client's
// text is the job's answer of record, and the stream ends as a finished answer does); a node that
// cannot continue ends the stream with the wire's error event, never with other text; a client
// that hangs up cancels its job.
import { sql } from '../src/db/database.js';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser } from './helpers/coordinator.js';
import { answerOf, piecesOf, type FakeBackend } from './helpers/backends.js';
import { until } from './helpers/worker.js';
import { nodeMaker } from './helpers/network.js';

const PROMPT = 'tell me a story about the river and the old stone bridge at night';

interface Wire {
  name: string;
  path: string;
  body(model: string): Record<string, unknown>;
  /** The text a data event carries, if any. */
  text(type: string, data: Record<string, unknown>): string;
  /** The job id a data event names, if any. */
  jobId(type: string, data: Record<string, unknown>): string | undefined;
  /** How a stream ended, from its last event. */
  ending(type: string, data: Record<string, unknown>): string;
}

const hexToUuid = (hex: string) => `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;

const WIRES: Wire[] = [
  {
    name: 'Anthropic Messages',
    path: '/v1/messages',
    body: (model) => ({ model, max_tokens: 200, stream: true, temperature: 0, messages: [{ role: 'user', content: PROMPT }] }),
    text: (type, d) =>
      type === 'content_block_delta' && (d.delta as { type: string }).type === 'text_delta' ? (d.delta as { text: string }).text : '',
    jobId: (type, d) => (type === 'message_start' ? hexToUuid((d.message as { id: string }).id.slice(4)) : undefined),
    ending: (type, d) =>
      type === 'message_stop'
        ? 'message_stop'
        : type === 'error'
          ? `error:${(d.error as { message: string }).message.includes('could not continue') ? 'diverged' : 'other'}`
          : type,
  },
  {
    name: 'OpenAI Responses',
    path: '/v1/responses',
    body: (model) => ({ model, stream: true, temperature: 0, input: PROMPT }),
    text: (type, d) => (type === 'response.output_text.delta' ? (d.delta as string) : ''),
    jobId: (type, d) => (type === 'response.created' ? hexToUuid((d.response as { id: string }).id.slice(5)) : undefined),
    ending: (type, d) =>
      type === 'response.failed'
        ? `failed:${(d.response as { error: { code: string } }).error.code === 'answer_diverged' ? 'diverged' : 'other'}`
        : type,
  },
];

describe.each(backends)("every front door's stream on $name", (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let url: string;
  let key: string;
  let user: TestUser;
  let nodes: ReturnType<typeof nodeMaker>;

  beforeAll(async () => {
    t = await startApp(backend, { coordinator: { sweepInterval: 0.05 } });
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    key = await t.addUser('doors');
    user = new TestUser(t.app, key);
    nodes = nodeMaker(t, () => url);
  });
  afterAll(async () => {
    await nodes.close();
    await t.close();
  });

  const backendFor = (model: string) => nodes.backendFor(model);
  const workerOn = (b: FakeBackend, continueAnswers = true) => nodes.workerOn(b, continueAnswers);

  /** Streams a request on the wire; `text` grows as events arrive; `done` resolves with the last event's ending. */
  function stream(wire: Wire, model: string) {
    const abort = new AbortController();
    const read = { jobId: '', text: '', types: [] as string[], abort, done: undefined as unknown as Promise<string> };
    read.done = (async () => {
      const res = await fetch(`${url}${wire.path}`, {
        method: 'POST',
        signal: abort.signal,
        headers: { 'x-api-key': key, authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(wire.body(model)),
      });
      expect(res.status).toBe(200);
      let last = '';
      const parser = createParser({
        onEvent: (e: EventSourceMessage) => {
          const data = JSON.parse(e.data) as Record<string, unknown>;
          const type = e.event ?? '';
          expect(data.type).toBe(type);
          read.types.push(type);
          read.jobId ||= wire.jobId(type, data) ?? '';
          read.text += wire.text(type, data);
          last = wire.ending(type, data);
        },
      });
      const decoder = new TextDecoder();
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) parser.feed(decoder.decode(chunk, { stream: true }));
      return last;
    })();
    return read;
  }
  const recorded = async (jobId: string) =>
    ((await user.result(jobId)).json() as { result: { message: { content: string } } }).result.message.content;

  for (const wire of WIRES) {
    it(`${wire.name}: a node failing mid-answer is continued by another, the stream ungarbled`, async () => {
      const model = `story-${wire.path.slice(4)}-fails`;
      const first = await backendFor(model);
      first.pauseAfter = 3;
      first.failAfter = 3;
      await workerOn(first);
      const whole = answerOf(model, [{ content: PROMPT }]);
      const read = stream(wire, model);
      await until('the client to read the first pieces', () => read.text === piecesOf(whole).slice(0, 3).join(''));
      await workerOn(await backendFor(model));
      first.resume();
      expect(await read.done).toBe(wire.path === '/v1/messages' ? 'message_stop' : 'response.completed');
      expect(read.text).toBe(whole);
      expect(await recorded(read.jobId)).toBe(whole);
      // The stream's time to first token, its queue time and its output rate, per model and node (the one that finished it), as vLLM names them.
      const [done] = await t.db.query<{ name: string }>(
        sql('t_done_node', 'SELECT n.name FROM jobs j JOIN nodes n ON n.id = j.node_id WHERE j.id = $1::uuid'),
        [read.jobId],
      );
      for (const name of ['ins_time_to_first_token_seconds', 'ins_request_queue_time_seconds', 'ins_output_tokens_per_second']) {
        await expect
          .poll(async () => (await t.app.inject({ method: 'GET', url: '/metrics' })).body, { timeout: 10_000 })
          .toMatch(new RegExp(`^${name}_count\\{model="${model}",node="${done!.name}"\\} 1$`, 'm'));
      }
      // The network view shows them: per node to a user key, per model alone to a stranger.
      const latency = async (headers: Record<string, string>) =>
        ((await t.app.inject({ method: 'GET', url: '/network', headers })).json() as { latency: Record<string, unknown>[] }).latency.filter(
          (l) => l.model === model,
        );
      const mine = await latency({ api_key: key });
      expect(mine).toEqual([expect.objectContaining({ model, node: done!.name, completions: 1 })]);
      expect(mine[0]!.time_to_first_token_seconds_p50).toBeGreaterThan(0);
      expect(mine[0]!.request_queue_time_seconds_p50).toBeGreaterThanOrEqual(0);
      expect(await latency({})).toEqual([expect.objectContaining({ model, node: null, completions: 1 })]);
    });

    it(`${wire.name}: a node that answers afresh ends the stream with the wire's error event, never other text`, async () => {
      const model = `story-${wire.path.slice(4)}-afresh`;
      const first = await backendFor(model);
      first.pauseAfter = 3;
      first.failAfter = 3;
      await workerOn(first);
      const begun = piecesOf(answerOf(model, [{ content: PROMPT }]))
        .slice(0, 3)
        .join('');
      const read = stream(wire, model);
      await until('the client to read the first pieces', () => read.text === begun);
      const other = await backendFor(model);
      other.answer = () => 'A different story altogether.';
      await workerOn(other, false);
      first.resume();
      expect(await read.done).toBe(wire.path === '/v1/messages' ? 'error:diverged' : 'failed:diverged');
      expect(read.text).toBe(begun);
    });

    it(`${wire.name}: a client that hangs up cancels its job`, async () => {
      const model = `story-${wire.path.slice(4)}-hangup`;
      const b = await backendFor(model);
      b.pauseAfter = 2;
      await workerOn(b);
      const read = stream(wire, model);
      await until('the client to read the first pieces', () => read.text.length > 0);
      read.abort.abort();
      await read.done.catch(() => undefined);
      await until('the job to be canceled', async () => ((await user.result(read.jobId)).json() as { status: string }).status === 'canceled');
      b.resume();
    });
  }
});
