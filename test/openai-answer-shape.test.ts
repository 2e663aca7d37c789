// A node's answer reaches an app as the request asked for it (src/routes/openai/answer-shape.ts,
// embeddings.ts): an outside probe's worker reported a tool call to a request with no tools,
// logprobs nobody asked for or in no shape OpenAI's SDK reads, and embeddings with NaN or of two
// sizes in one batch; each reached the app. Through the real app and the official SDK, on each backend.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestWorker } from './helpers/coordinator.js';

const base64Of = (v: number[]) => Buffer.from(new Float32Array(v).buffer).toString('base64');
const TOOL = { type: 'function' as const, function: { name: 'lookup', parameters: { type: 'object', properties: {} } } };
const CALL = { id: 'call_1', type: 'function', function: { name: 'rm_rf', arguments: '{}' } };
const LOGPROB = { token: 'hi', logprob: -0.1, bytes: [104, 105], top_logprobs: [{ token: 'hi', logprob: -0.1, bytes: [104, 105] }] };

describe.each(backends)('answers as requested on $name', (db) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let client: OpenAI;
  let node: TestWorker;

  beforeAll(async () => {
    t = await startApp(db);
    const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    client = new OpenAI({ apiKey: await t.addUser('app'), baseURL: `${url}/v1`, maxRetries: 0 });
    node = await new TestWorker(t.app, 'crafty', await t.addNode('crafty')).start([]);
    const caps = { chatty: ['tools', 'logprobs'], vectors: ['embeddings'] };
    expect((await node.post('/worker/update_models', { node_url: 'crafty', models: Object.keys(caps), capabilities: caps }, true)).statusCode).toBe(200);
  });
  afterAll(async () => t.close());

  /** Runs the request while the node answers its job with `result`. */
  const answered = async <T>(request: Promise<T>, result: Record<string, unknown>): Promise<T | unknown> => {
    const pending = request.catch((e: unknown) => e);
    const job = (await node.getJob(10))!;
    expect((await node.post('/worker/update_result', { job_id: job.job_id, api_key: job.api_key, model_name: job.model, status: 'success', result })).statusCode).toBe(200);
    return pending;
  };
  const chat = (extra: Record<string, unknown> = {}) => client.chat.completions.create({ model: 'chatty', messages: [{ role: 'user', content: 'hi' }], ...extra });

  it('leaves out tool calls where the request offered no tools, or said tool_choice "none"; keeps them where it offered', async () => {
    const message = { role: 'assistant', content: 'done', tool_calls: [CALL] };
    for (const extra of [{}, { tools: [TOOL], tool_choice: 'none' }]) {
      const r = await answered(chat(extra), { message, finish_reason: 'tool_calls' }) as OpenAI.ChatCompletion;
      expect(r.choices[0]).toMatchObject({ message: { content: 'done' }, finish_reason: 'stop' });
      expect(r.choices[0]!.message.tool_calls).toBeUndefined();
    }
    const offered = await answered(chat({ tools: [TOOL] }), { message }) as OpenAI.ChatCompletion;
    expect(offered.choices[0]).toMatchObject({ message: { tool_calls: [{ id: 'call_1', function: { name: 'rm_rf' } }] }, finish_reason: 'tool_calls' });
    // Streamed alike: no tool-call delta.
    const stream = await answered(chat({ stream: true }), { message }) as AsyncIterable<OpenAI.ChatCompletionChunk>;
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks.flatMap((c) => c.choices.flatMap((x) => x.delta.tool_calls ?? []))).toEqual([]);
    expect(chunks.flatMap((c) => c.choices.map((x) => x.finish_reason)).filter(Boolean)).toEqual(['stop']);
  });

  it('leaves out logprobs nobody asked for, or not in OpenAI\'s shape; keeps well-formed ones asked for', async () => {
    const unasked = await answered(chat(), { message: 'hi', logprobs: { content: [LOGPROB] } }) as OpenAI.ChatCompletion;
    expect(unasked.choices[0]!.logprobs).toBeNull();
    const malformed = await answered(chat({ logprobs: true }), { message: 'hi', logprobs: { content: [1, 'x', null] } }) as OpenAI.ChatCompletion;
    expect(malformed.choices[0]!.logprobs).toBeNull();
    const asked = await answered(chat({ logprobs: true, top_logprobs: 1 }), { message: 'hi', logprobs: { content: [LOGPROB] } }) as OpenAI.ChatCompletion;
    expect(asked.choices[0]!.logprobs).toEqual({ content: [LOGPROB], refusal: null });
  });

  it('takes any integer seed, as OpenAI does, into the backends\' range: the same seed, the same backend seed', async () => {
    for (const [seed, expected] of [[-5, 2 ** 31 - 5], [2 ** 32 + 7, 7], [12, 12]] as const) {
      const pending = chat({ seed }).catch((e: unknown) => e);
      const job = (await node.getJob(10))! as { job_id: string; api_key: string; model: string; seed?: number };
      expect(job.seed, String(seed)).toBe(expected);
      expect((await node.post('/worker/update_result', { job_id: job.job_id, api_key: job.api_key, model_name: job.model, status: 'success', result: { message: 'hi' } })).statusCode).toBe(200);
      expect(await pending).toMatchObject({ choices: [{ message: { content: 'hi' } }] });
    }
  });

  it('fails an embeddings job whose vectors differ in size or hold a number that is not finite: 502 job_failed', async () => {
    const embed = () => client.embeddings.create({ model: 'vectors', input: ['a', 'b'], encoding_format: 'float' });
    for (const embeddings of [[base64Of([0.5]), base64Of([0.5, 0.5])], [base64Of([Number.NaN, 1]), base64Of([1, 1])], [base64Of([Infinity, 1]), base64Of([1, 1])]]) {
      const e = await answered(embed(), { message: '', embeddings });
      expect(e).toBeInstanceOf(OpenAI.APIError);
      expect(e).toMatchObject({ status: 502, code: 'job_failed' });
    }
    const fine = await answered(embed(), { message: '', embeddings: [base64Of([0.5, 1]), base64Of([1, 0.25])] }) as OpenAI.CreateEmbeddingResponse;
    expect(fine.data.map((d) => d.embedding)).toEqual([[0.5, 1], [1, 0.25]]);
  });
});
