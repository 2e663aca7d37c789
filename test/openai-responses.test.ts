// Issue 54, OpenAI's Responses API (POST /v1/responses, GET/DELETE /v1/responses/{id}, POST
// /v1/responses/{id}/cancel) with the official `openai` SDK's responses.create / .stream / .parse,
// through the real app and real `ins worker`s (in process) on test backends that speak Ollama's
// and vLLM's wire (test/helpers/backends.ts): a function-call loop with and without
// previous_response_id, structured output, streamed events with sequence numbers, stored
// responses read back, deleted and continued, item_reference to their output items, what Codex
// sends beside, errors in OpenAI's shape.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { backends } from './helpers/db.js';
import { startNetwork, type TestNetwork } from './helpers/network.js';
import { TestWorker } from './helpers/coordinator.js';

const KINDS = ['ollama', 'vllm'] as const;
const weather = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'The weather in a city',
  strict: false,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

describe.each(backends)('POST /v1/responses on $name', (db) => {
  let net: TestNetwork<(typeof KINDS)[number]>;
  let t: TestNetwork<(typeof KINDS)[number]>['t'];
  let client: OpenAI;
  let url: string;
  let fakes: TestNetwork<(typeof KINDS)[number]>['fakes'];

  beforeAll(async () => {
    net = await startNetwork(db, KINDS);
    ({ t, url, fakes } = net);
    client = new OpenAI({ apiKey: await t.addUser('responses-sdk'), baseURL: `${url}/v1`, maxRetries: 0 });
  });
  afterAll(() => net.close());

  for (const kind of KINDS) {
    const model = `${kind}-model`;

    it(`${kind}: answers a response; instructions and developer messages go first; it is stored, read back and deleted`, async () => {
      const r = await client.responses.create({
        model,
        instructions: 'Be terse.',
        max_output_tokens: 50,
        temperature: 0.2,
        input: [
          { role: 'developer', content: 'No markdown.' },
          { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say hello' }] },
        ],
        // What Codex sends beside: reasoning for a model that does not reason, include, a cache key, hosted tools it always sends.
        reasoning: { summary: 'auto' },
        include: ['reasoning.encrypted_content'],
        prompt_cache_key: 'k',
        store: true,
        tools: [{ type: 'web_search', external_web_access: false } as never],
      });
      expect(r).toMatchObject({
        object: 'response',
        status: 'completed',
        model,
        instructions: 'Be terse.',
        error: null,
        incomplete_details: null,
        output_text: `echo(${model}): Say hello`,
      });
      expect(r.id).toMatch(/^resp_[0-9a-f]{32}$/);
      expect(r.usage).toMatchObject({ output_tokens: 3, input_tokens: expect.any(Number), total_tokens: expect.any(Number) });
      const sent = fakes[kind].requests.at(-1)!;
      expect(sent.messages).toEqual([
        { role: 'system', content: 'Be terse.\n\nNo markdown.' },
        { role: 'user', content: 'Say hello' },
      ]);
      expect(sent).not.toHaveProperty('tools');
      const back = await client.responses.retrieve(r.id);
      expect(back).toMatchObject({ id: r.id, status: 'completed', output_text: `echo(${model}): Say hello` });
      expect(await client.responses.delete(r.id)).toMatchObject({ id: r.id, deleted: true });
      await expect(client.responses.retrieve(r.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
      const gone = await client.responses.create({ model, previous_response_id: r.id, input: 'again' }).catch((e: unknown) => e);
      expect(gone).toMatchObject({ status: 400, param: 'previous_response_id', code: 'previous_response_not_found' });
    });

    it(`${kind}: streams typed events with sequence numbers and exactly one terminal event`, async () => {
      const stream = client.responses.stream({ model, input: 'The quick brown fox' });
      const types: string[] = [];
      const seqs: number[] = [];
      let text = '';
      for await (const e of stream) {
        types.push(e.type);
        seqs.push(e.sequence_number);
        if (e.type === 'response.output_text.delta') text += e.delta;
      }
      const final = await stream.finalResponse();
      expect(text).toBe(`echo(${model}): The quick brown fox`);
      expect(final.output_text).toBe(text);
      expect(seqs).toEqual(seqs.map((_, i) => i));
      expect(types.slice(0, 4)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
      expect(types.slice(-4)).toEqual(['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
      expect(types.filter((x) => x === 'response.completed' || x === 'response.incomplete' || x === 'response.failed')).toHaveLength(1);
    });

    it(`${kind}: runs a function-call loop, by previous_response_id and by sending the items back`, async () => {
      fakes[kind].toolCall = { name: 'get_weather', arguments: { city: 'Paris' } };
      try {
        const first = await client.responses.create({ model, tools: [weather], input: 'Weather in Paris?' });
        const call = first.output.find((o) => o.type === 'function_call');
        expect(call).toMatchObject({ type: 'function_call', name: 'get_weather', arguments: '{"city":"Paris"}', status: 'completed' });
        const callId = call!.type === 'function_call' ? call!.call_id : '';
        const byId = await client.responses.create({
          model,
          tools: [weather],
          previous_response_id: first.id,
          input: [{ type: 'function_call_output', call_id: callId, output: 'Sunny, 21 C' }],
        });
        expect(byId.output_text).toBe(`echo(${model}): Sunny, 21 C`);
        expect(byId.previous_response_id).toBe(first.id);
        expect((fakes[kind].requests.at(-1)!.messages as { role: string }[]).map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
        // Codex's way: store false, the whole history sent back, reasoning items among it.
        const byItems = await client.responses.create({
          model,
          tools: [weather],
          store: false,
          input: [
            { role: 'user', content: 'Weather in Paris?' },
            { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: 'x' } as never,
            { type: 'function_call', call_id: callId, name: 'get_weather', arguments: '{"city":"Paris"}' },
            { type: 'function_call_output', call_id: callId, output: 'Rainy' },
          ],
        });
        expect(byItems.output_text).toBe(`echo(${model}): Rainy`);
        const unstored = await client.responses.create({ model, previous_response_id: byItems.id, input: 'more' }).catch((e: unknown) => e);
        expect(unstored).toMatchObject({ status: 400, param: 'previous_response_id', code: 'previous_response_not_stored' });
      } finally {
        fakes[kind].toolCall = undefined;
      }
    });

    it(`${kind}: reads an item_reference to an output item of the key's stored response as that item (the Vercel AI SDK's way with store)`, async () => {
      fakes[kind].toolCall = { name: 'get_weather', arguments: { city: 'Paris' } };
      let call: OpenAI.Responses.ResponseFunctionToolCall;
      try {
        const first = await client.responses.create({ model, tools: [weather], input: 'Weather in Paris?' });
        call = first.output.find((o) => o.type === 'function_call')!;
      } finally {
        fakes[kind].toolCall = undefined;
      }
      const hello = await client.responses.create({ model, input: 'Hello' });
      const said = hello.output.find((o) => o.type === 'message')!;
      const r = await client.responses.create({
        model,
        tools: [weather],
        input: [
          { role: 'user', content: 'Hello' },
          { type: 'item_reference', id: said.id },
          { role: 'user', content: 'Weather in Paris?' },
          { type: 'item_reference', id: call.id! },
          { type: 'function_call_output', call_id: call.call_id, output: 'Sunny' },
        ],
      });
      expect(r.output_text).toBe(`echo(${model}): Sunny`);
      const sent = fakes[kind].requests.at(-1)!.messages as { role: string; content: string }[];
      expect(sent.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant', 'tool']);
      expect(sent[1]!.content).toBe(`echo(${model}): Hello`);
      // Not stored, another key's, deleted, or no output item of ours: 400, naming the reference.
      const unstored = await client.responses.create({ model, input: 'x', store: false });
      const other = await new OpenAI({ apiKey: await t.addUser(`other-${kind}`), baseURL: `${url}/v1`, maxRetries: 0 }).responses.create({
        model,
        input: 'x',
      });
      const deleted = await client.responses.create({ model, input: 'x' });
      await client.responses.delete(deleted.id);
      for (const id of [
        unstored.output[0]!.id!,
        other.output[0]!.id!,
        deleted.output[0]!.id!,
        'msg_00000000000000000000000000000000',
        'rs_1',
        `fc_${hello.id.slice(5)}_0`,
      ]) {
        const e = await client.responses
          .create({
            model,
            input: [
              { role: 'user', content: 'x' },
              { type: 'item_reference', id },
            ],
          })
          .catch((x: unknown) => x);
        expect(e, id).toMatchObject({ status: 400, param: 'input[1].id', code: 'item_not_found' });
      }
    });

    it(`${kind}: streams a function call as argument deltas`, async () => {
      fakes[kind].toolCall = { name: 'get_weather', arguments: { city: 'Lyon, France, a city whose name is long enough for pieces' } };
      try {
        const stream = client.responses.stream({ model, tools: [weather], input: 'Weather?' });
        const types: string[] = [];
        for await (const e of stream) types.push(e.type);
        const final = await stream.finalResponse();
        expect(final.output).toEqual([
          expect.objectContaining({
            type: 'function_call',
            name: 'get_weather',
            arguments: JSON.stringify({ city: 'Lyon, France, a city whose name is long enough for pieces' }),
          }),
        ]);
        expect(types.filter((x) => x === 'response.function_call_arguments.delta').length).toBeGreaterThan(1);
        expect(types.slice(-3)).toEqual(['response.function_call_arguments.done', 'response.output_item.done', 'response.completed']);
      } finally {
        fakes[kind].toolCall = undefined;
      }
    });

    it(`${kind}: parses structured output (responses.parse with text.format json_schema)`, async () => {
      const schema = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'], additionalProperties: false };
      const r = await client.responses.parse({
        model,
        input: 'Reply in JSON',
        text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } },
      });
      expect(r.output_parsed).toEqual({ answer: `echo(${model}): Reply in JSON` });
    });
  }

  it('says incomplete when the node stopped at max_output_tokens', async () => {
    const seed = await new TestWorker(t.app, 'seed-node', await t.addNode('seed-node')).start(['seed-model']);
    try {
      const pending = client.responses.create({ model: 'seed-model', input: 'long story', max_output_tokens: 3 });
      const job = await seed.getJob(10);
      const res = await seed.post('/worker/update_result', {
        job_id: job!.job_id,
        api_key: job!.api_key,
        model_name: job!.model,
        status: 'success',
        result: { message: 'one two three' },
        usage: { prompt_tokens: 2, completion_tokens: 3 },
      });
      expect(res.statusCode).toBe(200);
      const r = await pending;
      expect(r).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, output_text: 'one two three' });
      expect(await client.responses.retrieve(r.id)).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } });
    } finally {
      await seed.deregister();
    }
  });

  it("refuses what it cannot honour by name, in OpenAI's shape; nothing is queued", async () => {
    const cases: [Record<string, unknown>, number, string, string][] = [
      [{ model: 'vllm-model', input: 'x', background: true }, 400, 'background', 'unsupported_parameter'],
      [{ model: 'vllm-model', input: 'x', tools: [{ type: 'file_search', vector_store_ids: ['v'] }] }, 400, 'tools[0].type', 'unsupported_parameter'],
      [
        { model: 'vllm-model', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }] },
        400,
        'input[0].content[0]',
        'unsupported_content',
      ],
      [{ model: 'vllm-model', input: [{ type: 'function_call_output', call_id: 'nope', output: 'x' }] }, 400, 'input[0].call_id', 'invalid_value'],
      [
        { model: 'vllm-model', input: 'x', previous_response_id: 'resp_00000000000000000000000000000000' },
        400,
        'previous_response_id',
        'previous_response_not_found',
      ],
      [{ model: 'vllm-model' }, 400, 'input', 'missing_required_parameter'],
      [{ model: 'nobody-serves-it', input: 'x' }, 404, 'model', 'model_not_found'],
    ];
    for (const [body, status, param, code] of cases) {
      const e = await client.responses.create(body as never).catch((x: unknown) => x);
      expect(e, JSON.stringify(body)).toBeInstanceOf(OpenAI.APIError);
      expect(e, JSON.stringify(body)).toMatchObject({ status, param, code });
    }
    await expect(client.responses.retrieve('resp_00000000000000000000000000000000')).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const queued = await t.db.query<{ n: number }>(sql('t_responses_queued', "SELECT count(*)::int AS n FROM jobs WHERE state = 'queued'"));
    expect(queued).toEqual([{ n: 0 }]);
  });

  it('checks the key before any /v1 path: a made-up key gets 401 on a path that is not served, a valid one 404', async () => {
    for (const path of ['/v1/responses', '/v1/messages', '/v1/batches', '/v1/nothing/here']) {
      const bad = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: { authorization: 'Bearer uk_made_up', 'content-type': 'application/json' },
        body: '{}',
      });
      expect(bad.status, path).toBe(401);
    }
    const served = await fetch(`${url}/v1/batches`, { headers: { authorization: `Bearer ${client.apiKey}` } });
    expect(served.status).toBe(404);
  });
});
