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
const call = (id: string, name: string, args = '{}') => ({ id, type: 'function', function: { name, arguments: args } });
const STRICT = {
  type: 'function' as const,
  function: {
    name: 'weather',
    strict: true,
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
  },
};
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
    const caps = { chatty: ['tools', 'logprobs', 'tool_choice', 'json'], vectors: ['embeddings'], texty: ['completions'] };
    expect((await node.post('/worker/update_models', { node_url: 'crafty', models: Object.keys(caps), capabilities: caps }, true)).statusCode).toBe(
      200,
    );
  });
  afterAll(async () => t.close());

  /** Runs the request while the node answers its job with `result`. */
  const answered = async <T>(request: Promise<T>, result: Record<string, unknown>): Promise<T | unknown> => {
    const pending = request.catch((e: unknown) => e);
    const job = (await node.getJob(10))!;
    expect(
      (await node.post('/worker/update_result', { job_id: job.job_id, api_key: job.api_key, model_name: job.model, status: 'success', result }))
        .statusCode,
    ).toBe(200);
    return pending;
  };
  const chat = (extra: Record<string, unknown> = {}) =>
    client.chat.completions.create({ model: 'chatty', messages: [{ role: 'user', content: 'hi' }], ...extra });

  it('leaves out tool calls where the request offered no tools, or said tool_choice "none"; keeps them where it offered', async () => {
    const message = { role: 'assistant', content: 'done', tool_calls: [CALL] };
    for (const extra of [{}, { tools: [TOOL], tool_choice: 'none' }]) {
      const r = (await answered(chat(extra), { message, finish_reason: 'tool_calls' })) as OpenAI.ChatCompletion;
      expect(r.choices[0]).toMatchObject({ message: { content: 'done' }, finish_reason: 'stop' });
      expect(r.choices[0]!.message.tool_calls).toBeUndefined();
    }
    const offered = (await answered(chat({ tools: [TOOL] }), {
      message: { ...message, tool_calls: [call('call_1', 'lookup')] },
    })) as OpenAI.ChatCompletion;
    expect(offered.choices[0]).toMatchObject({
      message: { tool_calls: [{ id: 'call_1', function: { name: 'lookup' } }] },
      finish_reason: 'tool_calls',
    });
    // Streamed alike: no tool-call delta.
    const stream = (await answered(chat({ stream: true }), { message })) as AsyncIterable<OpenAI.ChatCompletionChunk>;
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks.flatMap((c) => c.choices.flatMap((x) => x.delta.tool_calls ?? []))).toEqual([]);
    expect(chunks.flatMap((c) => c.choices.map((x) => x.finish_reason)).filter(Boolean)).toEqual(['stop']);
  });

  it('keeps only the calls the request allowed: to a tool it offered, the one tool_choice named, the first when parallel_tool_calls is false', async () => {
    const tools = [TOOL, { type: 'function' as const, function: { name: 'other', parameters: { type: 'object', properties: {} } } }];
    const made = [call('c1', 'rm_rf'), call('c2', 'other'), call('c3', 'lookup')];
    const names = (r: unknown) => (r as OpenAI.ChatCompletion).choices[0]!.message.tool_calls!.map((c) => (c as { id: string }).id);
    expect(names(await answered(chat({ tools }), { message: { role: 'assistant', content: '', tool_calls: made } }))).toEqual(['c2', 'c3']);
    expect(
      names(
        await answered(chat({ tools, tool_choice: { type: 'function', function: { name: 'lookup' } } }), {
          message: { role: 'assistant', content: '', tool_calls: made },
        }),
      ),
    ).toEqual(['c3']);
    expect(
      names(await answered(chat({ tools, parallel_tool_calls: false }), { message: { role: 'assistant', content: '', tool_calls: made } })),
    ).toEqual(['c2']);
    // None left: the text alone, finished as "stop".
    const none = (await answered(chat({ tools }), {
      message: { role: 'assistant', content: 'no', tool_calls: [CALL] },
      finish_reason: 'tool_calls',
    })) as OpenAI.ChatCompletion;
    expect(none.choices[0]).toMatchObject({ message: { content: 'no' }, finish_reason: 'stop' });
    expect(none.choices[0]!.message.tool_calls).toBeUndefined();
    // A named or required tool_choice that the answer does not meet is no answer: 502 invalid_answer.
    for (const tool_choice of ['required', { type: 'function', function: { name: 'lookup' } }]) {
      const e = await answered(chat({ tools, tool_choice }), { message: { role: 'assistant', content: 'no', tool_calls: [CALL] } });
      expect(e, JSON.stringify(tool_choice)).toMatchObject({ status: 502, code: 'invalid_answer' });
    }
  });

  it('fails as 502 invalid_answer an answer that breaks a strict schema or JSON mode, unless cut at max_tokens; streamed alike', async () => {
    const weather = (args: string) => ({ message: { role: 'assistant', content: '', tool_calls: [call('w', 'weather', args)] } });
    const good = (await answered(chat({ tools: [STRICT] }), weather('{"city":"Paris"}'))) as OpenAI.ChatCompletion;
    expect(good.choices[0]!.message.tool_calls).toHaveLength(1);
    for (const args of ['{"city":"Paris","extra":true}', '{}', 'not json']) {
      const e = await answered(chat({ tools: [STRICT] }), weather(args));
      expect(e, args).toBeInstanceOf(OpenAI.APIError);
      expect(e, args).toMatchObject({ status: 502, code: 'invalid_answer' });
    }
    // Not strict: the node's arguments as they are.
    const loose = { ...STRICT, function: { ...STRICT.function, strict: false } };
    expect(((await answered(chat({ tools: [loose] }), weather('{"x":1}'))) as OpenAI.ChatCompletion).choices[0]!.message.tool_calls).toHaveLength(1);
    const schema = { type: 'json_schema', json_schema: { name: 'city', strict: true, schema: STRICT.function.parameters } };
    expect(
      ((await answered(chat({ response_format: schema }), { message: '{"city":"Oslo"}' })) as OpenAI.ChatCompletion).choices[0]!.message.content,
    ).toBe('{"city":"Oslo"}');
    for (const [response_format, text] of [
      [schema, '{"town":"Oslo"}'],
      [schema, 'Oslo'],
      [{ type: 'json_object' }, 'Oslo, as json'],
    ] as const) {
      const e = await answered(chat({ response_format, messages: [{ role: 'user', content: 'json please' }] }), { message: text });
      expect(e, text).toMatchObject({ status: 502, code: 'invalid_answer' });
    }
    // Cut at max_tokens: OpenAI's JSON may be unfinished too; so when the node's count says so (the seed's workers say no finish_reason).
    const counted = (await answered(
      chat({ response_format: { type: 'json_object' }, max_tokens: 4, messages: [{ role: 'user', content: 'json' }] }),
      { message: '{"ci', usage: { prompt_tokens: 3, completion_tokens: 4 } },
    )) as OpenAI.ChatCompletion;
    expect(counted.choices[0]).toMatchObject({ message: { content: '{"ci' }, finish_reason: 'length' });
    // A count past the answer's bytes is charged at those bytes (sql/complete.ts), and still says it reached max_tokens (a review: 502 before).
    const hidden = (await answered(
      chat({ response_format: { type: 'json_object' }, max_tokens: 200, messages: [{ role: 'user', content: 'json' }] }),
      { message: '{"a": ', usage: { prompt_tokens: 3, completion_tokens: 200 } },
    )) as OpenAI.ChatCompletion;
    expect(hidden.choices[0]).toMatchObject({ message: { content: '{"a": ' }, finish_reason: 'length' });
    expect(hidden.usage).toMatchObject({ completion_tokens: 6 + 16 });
    const cut = (await answered(chat({ response_format: { type: 'json_object' }, messages: [{ role: 'user', content: 'json' }] }), {
      message: '{"ci',
      finish_reason: 'length',
    })) as OpenAI.ChatCompletion;
    expect(cut.choices[0]).toMatchObject({ message: { content: '{"ci' }, finish_reason: 'length' });
    const stream = (await answered(chat({ tools: [STRICT], stream: true }), weather('{"city":1}'))) as AsyncIterable<OpenAI.ChatCompletionChunk>;
    const caught = await (async () => {
      for await (const c of stream) void c;
    })().catch((e: unknown) => e);
    expect(caught).toMatchObject({ code: 'invalid_answer' });
  });

  it('refuses a strict schema it cannot compile or too large to check, and tools of another type, at once; takes recursive and 2020-12 ones', async () => {
    const bad = { ...STRICT, function: { ...STRICT.function, parameters: { type: 'object', properties: { a: { $ref: '#/nowhere' } } } } };
    await expect(chat({ tools: [bad] })).rejects.toMatchObject({ status: 400, code: 'invalid_value', param: 'tools[0].function.parameters' });
    const huge = {
      ...STRICT,
      function: {
        ...STRICT.function,
        parameters: {
          type: 'object',
          properties: Object.fromEntries(Array.from({ length: 400 }, (_, i) => [`property_${i}`, { type: 'string', description: 'a field' }])),
        },
      },
    };
    await expect(chat({ tools: [huge] })).rejects.toMatchObject({ status: 400, code: 'invalid_value', param: 'tools[0].function.parameters' });
    // OpenAI's recursive form ("$ref": "#") and Zod 4's $schema: checked, not refused.
    const tree = {
      type: 'object',
      properties: { name: { type: 'string' }, children: { type: 'array', items: { $ref: '#' } } },
      required: ['name', 'children'],
      additionalProperties: false,
    };
    const schema = {
      type: 'json_schema',
      json_schema: { name: 'tree', strict: true, schema: { $schema: 'https://json-schema.org/draft/2020-12/schema', ...tree } },
    };
    const good = '{"name":"a","children":[{"name":"b","children":[]}]}';
    expect(((await answered(chat({ response_format: schema }), { message: good })) as OpenAI.ChatCompletion).choices[0]!.message.content).toBe(good);
    expect(await answered(chat({ response_format: schema }), { message: '{"name":"a","children":[{"name":1,"children":[]}]}' })).toMatchObject({
      status: 502,
      code: 'invalid_answer',
    });
    await expect(chat({ tools: [{ type: 'custom', custom: { name: 'x' } }] as never })).rejects.toMatchObject({
      status: 400,
      code: 'unsupported_parameter',
      param: 'tools[0].type',
    });
  });

  it("takes an assistant's refusal parts as that turn's text, and any integer seed on /v1/completions too", async () => {
    const pending = chat({
      messages: [
        { role: 'user', content: 'x' },
        { role: 'assistant', content: [{ type: 'refusal', refusal: 'I cannot.' }] },
        { role: 'user', content: 'y' },
      ],
    }).catch((e: unknown) => e);
    const job = (await node.getJob(10))! as { job_id: string; api_key: string; model: string; messages: { content: string }[] };
    expect(job.messages.map((m) => m.content)).toEqual(['x', 'I cannot.', 'y']);
    expect(
      (
        await node.post('/worker/update_result', {
          job_id: job.job_id,
          api_key: job.api_key,
          model_name: job.model,
          status: 'success',
          result: { message: 'ok' },
        })
      ).statusCode,
    ).toBe(200);
    expect(await pending).toMatchObject({ choices: [{ message: { content: 'ok' } }] });
    await expect(chat({ messages: [{ role: 'user', content: [{ type: 'refusal', refusal: 'no' }] }] as never })).rejects.toMatchObject({
      status: 400,
      code: 'unsupported_content',
    });
    const text = client.completions.create({ model: 'texty', prompt: 'x', seed: -1 }).catch((e: unknown) => e);
    const tjob = (await node.getJob(10))! as { job_id: string; api_key: string; model: string; seed?: number };
    expect(tjob.seed).toBe(2 ** 31 - 1);
    expect(
      (
        await node.post('/worker/update_result', {
          job_id: tjob.job_id,
          api_key: tjob.api_key,
          model_name: tjob.model,
          status: 'success',
          result: { message: 'ok' },
        })
      ).statusCode,
    ).toBe(200);
    expect(await text).toMatchObject({ choices: [{ text: 'ok' }] });
  });

  it("leaves out logprobs nobody asked for, or not in OpenAI's shape; keeps well-formed ones asked for", async () => {
    const unasked = (await answered(chat(), { message: 'hi', logprobs: { content: [LOGPROB] } })) as OpenAI.ChatCompletion;
    expect(unasked.choices[0]!.logprobs).toBeNull();
    const malformed = (await answered(chat({ logprobs: true }), { message: 'hi', logprobs: { content: [1, 'x', null] } })) as OpenAI.ChatCompletion;
    expect(malformed.choices[0]!.logprobs).toBeNull();
    const asked = (await answered(chat({ logprobs: true, top_logprobs: 1 }), {
      message: 'hi',
      logprobs: { content: [LOGPROB] },
    })) as OpenAI.ChatCompletion;
    expect(asked.choices[0]!.logprobs).toEqual({ content: [LOGPROB], refusal: null });
  });

  it("takes any integer seed, as OpenAI does, into the backends' range: the same seed, the same backend seed", async () => {
    for (const [seed, expected] of [
      [-5, 2 ** 31 - 5],
      [2 ** 32 + 7, 7],
      [12, 12],
    ] as const) {
      const pending = chat({ seed }).catch((e: unknown) => e);
      const job = (await node.getJob(10))! as { job_id: string; api_key: string; model: string; seed?: number };
      expect(job.seed, String(seed)).toBe(expected);
      expect(
        (
          await node.post('/worker/update_result', {
            job_id: job.job_id,
            api_key: job.api_key,
            model_name: job.model,
            status: 'success',
            result: { message: 'hi' },
          })
        ).statusCode,
      ).toBe(200);
      expect(await pending).toMatchObject({ choices: [{ message: { content: 'hi' } }] });
    }
  });

  it('fails an embeddings job whose vectors differ in size or hold a number that is not finite: 502 job_failed', async () => {
    const embed = () => client.embeddings.create({ model: 'vectors', input: ['a', 'b'], encoding_format: 'float' });
    for (const embeddings of [
      [base64Of([0.5]), base64Of([0.5, 0.5])],
      [base64Of([Number.NaN, 1]), base64Of([1, 1])],
      [base64Of([Infinity, 1]), base64Of([1, 1])],
    ]) {
      const e = await answered(embed(), { message: '', embeddings });
      expect(e).toBeInstanceOf(OpenAI.APIError);
      expect(e).toMatchObject({ status: 502, code: 'job_failed' });
    }
    const fine = (await answered(embed(), { message: '', embeddings: [base64Of([0.5, 1]), base64Of([1, 0.25])] })) as OpenAI.CreateEmbeddingResponse;
    expect(fine.data.map((d) => d.embedding)).toEqual([
      [0.5, 1],
      [1, 0.25],
    ]);
  });
});
