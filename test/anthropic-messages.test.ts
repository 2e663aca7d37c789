// Issue 54, Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) with the
// official `@anthropic-ai/sdk`, through the real app and real `ins worker`s (in process) on test
// backends that speak Ollama's and vLLM's wire (test/helpers/backends.ts): plain, streamed
// (`messages.stream`), a tool loop, streamed tool use, stop sequences, count_tokens, errors in
// Anthropic's shape; what Claude Code sends beside (a system message after the user's turn,
// thinking, cache_control, context_management, output_config's effort) changes nothing;
// output_config.format (structured outputs) is honoured.
import Anthropic from '@anthropic-ai/sdk';
import { jsonSchemaOutputFormat } from '@anthropic-ai/sdk/helpers/json-schema';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { backends } from './helpers/db.js';
import { startNetwork, type TestNetwork } from './helpers/network.js';

const KINDS = ['ollama', 'vllm'] as const;
const weather = {
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
};

describe.each(backends)('POST /v1/messages on $name', (db) => {
  let net: TestNetwork<(typeof KINDS)[number]>;
  let t: TestNetwork<(typeof KINDS)[number]>['t'];
  let client: Anthropic;
  let url: string;
  let key: string;
  let fakes: TestNetwork<(typeof KINDS)[number]>['fakes'];

  beforeAll(async () => {
    net = await startNetwork(db, KINDS);
    ({ t, url, fakes } = net);
    key = await t.addUser('anthropic-sdk');
    client = new Anthropic({ apiKey: key, baseURL: url, maxRetries: 0 });
  });
  afterAll(() => net.close());

  for (const kind of KINDS) {
    const model = `${kind}-model`;

    it(`${kind}: answers a message; the system prompt, blocks and Claude Code's extras reach the node as one conversation`, async () => {
      const m = await client.messages.create({
        model,
        max_tokens: 64,
        temperature: 0.3,
        system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }],
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Say hello' },
              { type: 'text', text: ' twice', cache_control: { type: 'ephemeral' } },
            ],
          },
          // Claude Code sends a system message after the user's turn; and thinking, context management, effort.
          { role: 'system' as 'user', content: 'Agents available: none.' },
        ],
        metadata: { user_id: 'u-1' },
        ...({
          thinking: { type: 'adaptive' },
          context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
          output_config: { effort: 'high' },
        } as object),
      });
      expect(m).toMatchObject({
        type: 'message',
        role: 'assistant',
        model,
        stop_reason: 'end_turn',
        stop_sequence: null,
        content: [{ type: 'text', text: `echo(${model}): Say hello twice` }],
      });
      expect(m.id).toMatch(/^msg_[0-9a-f]{32}$/);
      expect(m.usage).toMatchObject({ input_tokens: expect.any(Number), output_tokens: 4 });
      const sent = fakes[kind].requests.at(-1)!;
      expect(sent.messages).toEqual([
        { role: 'system', content: 'You are terse.\n\nAgents available: none.' },
        { role: 'user', content: 'Say hello twice' },
      ]);
      expect(kind === 'ollama' ? (sent.options as Record<string, unknown>).temperature : sent.temperature).toBe(0.3);
    });

    it(`${kind}: streams the full event sequence the SDK assembles (messages.stream)`, async () => {
      const events: string[] = [];
      const stream = client.messages.stream({ model, max_tokens: 64, messages: [{ role: 'user', content: 'The quick brown fox' }] });
      stream.on('streamEvent', (e) => events.push(e.type));
      const text: string[] = [];
      stream.on('text', (d) => text.push(d));
      const final = await stream.finalMessage();
      expect(text.join('')).toBe(`echo(${model}): The quick brown fox`);
      expect(final).toMatchObject({
        stop_reason: 'end_turn',
        content: [{ type: 'text', text: `echo(${model}): The quick brown fox` }],
        usage: { output_tokens: 5 },
      });
      expect(events[0]).toBe('message_start');
      expect(events.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
      expect(events).toContain('content_block_start');
      expect(events).toContain('content_block_delta');
    });

    it(`${kind}: runs a tool loop: tool_use, then the tool_result answered`, async () => {
      fakes[kind].toolCall = { name: 'get_weather', arguments: { city: 'Paris' } };
      try {
        const first = await client.messages.create({
          model,
          max_tokens: 64,
          tools: [weather],
          tool_choice: { type: 'auto' },
          messages: [{ role: 'user', content: 'Weather in Paris?' }],
        });
        expect(first.stop_reason).toBe('tool_use');
        const use = first.content.find((b) => b.type === 'tool_use');
        expect(use).toMatchObject({ type: 'tool_use', name: 'get_weather', input: { city: 'Paris' } });
        const second = await client.messages.create({
          model,
          max_tokens: 64,
          tools: [weather],
          messages: [
            { role: 'user', content: 'Weather in Paris?' },
            {
              role: 'assistant',
              content: [{ type: 'thinking', thinking: 'Call it.', signature: 'sig' }, ...first.content] as Anthropic.ContentBlockParam[],
            },
            { role: 'user', content: [{ type: 'tool_result', tool_use_id: use!.type === 'tool_use' ? use!.id : '', content: 'Sunny, 21 C' }] },
          ],
        });
        expect(second).toMatchObject({ stop_reason: 'end_turn', content: [{ type: 'text', text: `echo(${model}): Sunny, 21 C` }] });
        const sent = fakes[kind].requests.at(-1)!;
        expect((sent.messages as { role: string }[]).map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
      } finally {
        fakes[kind].toolCall = undefined;
      }
    });

    it(`${kind}: streams tool use as input_json_delta`, async () => {
      fakes[kind].toolCall = { name: 'get_weather', arguments: { city: 'Lyon, France, a city whose name is long enough for pieces' } };
      try {
        // A named tool choice needs the capability tool_choice, which the vLLM-faced node has and the Ollama-faced one has not: refused by capability, as chat's is.
        const choice = { type: 'tool' as const, name: 'get_weather' };
        if (kind === 'ollama') {
          const refused = await client.messages
            .create({ model, max_tokens: 64, tools: [weather], tool_choice: choice, messages: [{ role: 'user', content: 'Weather?' }] })
            .catch((e: unknown) => e);
          expect(refused).toMatchObject({
            status: 400,
            error: { error: { type: 'invalid_request_error', message: expect.stringContaining("'tool_choice' needs the capability 'tool_choice'") } },
          });
        }
        const stream = client.messages.stream({
          model,
          max_tokens: 64,
          tools: [weather],
          tool_choice: kind === 'ollama' ? { type: 'auto' } : choice,
          messages: [{ role: 'user', content: 'Weather?' }],
        });
        const deltas: string[] = [];
        stream.on('inputJson', (d) => deltas.push(d));
        const final = await stream.finalMessage();
        expect(final.stop_reason).toBe('tool_use');
        expect(final.content).toEqual([
          expect.objectContaining({
            type: 'tool_use',
            name: 'get_weather',
            input: { city: 'Lyon, France, a city whose name is long enough for pieces' },
          }),
        ]);
        expect(deltas.length).toBeGreaterThan(1);
      } finally {
        fakes[kind].toolCall = undefined;
      }
    });

    it(`${kind}: structured outputs: output_config.format's schema reaches the node and the answer keeps it (messages.parse)`, async () => {
      const schema = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'], additionalProperties: false } as const;
      const m = await client.messages.parse({
        model,
        max_tokens: 64,
        messages: [{ role: 'user', content: 'Reply in JSON' }],
        output_config: { format: jsonSchemaOutputFormat(schema) },
      });
      expect(m.parsed_output).toEqual({ answer: `echo(${model}): Reply in JSON` });
      const sent = fakes[kind].requests.at(-1)!;
      if (kind === 'ollama') expect(sent.format).toEqual(schema);
      else expect(sent.response_format).toMatchObject({ type: 'json_schema', json_schema: { schema, strict: true } });
      const wrong = await client.messages
        .create({ model, max_tokens: 64, messages: [{ role: 'user', content: 'x' }], ...({ output_config: { format: { type: 'xml' } } } as object) })
        .catch((e: unknown) => e);
      expect(wrong).toMatchObject({
        status: 400,
        error: { error: { type: 'invalid_request_error', message: expect.stringContaining('output_config.format.type') } },
      });
    });

    it(`${kind}: a strict tool's calls keep its input_schema: a call that does not is no answer (502 api_error)`, async () => {
      const strict = { ...weather, strict: true, input_schema: { ...weather.input_schema, additionalProperties: false } };
      fakes[kind].toolCall = { name: 'get_weather', arguments: { city: 'Paris' } };
      try {
        const kept = await client.messages.create({
          model,
          max_tokens: 64,
          tools: [strict as never],
          messages: [{ role: 'user', content: 'Weather?' }],
        });
        expect(kept.content).toEqual([expect.objectContaining({ type: 'tool_use', input: { city: 'Paris' } })]);
        fakes[kind].toolCall = { name: 'get_weather', arguments: { town: 'Paris' } };
        const broken = await client.messages
          .create({ model, max_tokens: 64, tools: [strict as never], messages: [{ role: 'user', content: 'Weather?' }] })
          .catch((e: unknown) => e);
        expect(broken).toBeInstanceOf(Anthropic.InternalServerError);
        expect(broken).toMatchObject({
          status: 502,
          error: { type: 'error', error: { type: 'api_error', message: expect.stringContaining('strict schema') } },
        });
      } finally {
        fakes[kind].toolCall = undefined;
      }
    });

    it(`${kind}: passes stop_sequences and top_p on in the backend's form`, async () => {
      await client.messages.create({
        model,
        max_tokens: 20,
        stop_sequences: ['END', 'STOP'],
        top_p: 0.5,
        messages: [{ role: 'user', content: 'count' }],
      });
      const sent = fakes[kind].requests.at(-1)!;
      if (kind === 'ollama') expect(sent.options).toMatchObject({ stop: ['END', 'STOP'], top_p: 0.5, num_predict: 20 });
      else expect(sent).toMatchObject({ stop: ['END', 'STOP'], top_p: 0.5, max_tokens: 20 });
    });
  }

  it('count_tokens estimates without a node, and takes the key as x-api-key or Bearer', async () => {
    const r = await client.messages.countTokens({
      model: 'any-model-at-all',
      system: 'You are terse.',
      messages: [{ role: 'user', content: 'x'.repeat(400) }],
      tools: [weather],
    });
    expect(r.input_tokens).toBeGreaterThan(100);
    const bearer = await fetch(`${url}/v1/messages/count_tokens?beta=true`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(bearer.status).toBe(200);
  });

  it("answers errors in Anthropic's shape with the matching status and SDK class; nothing is queued", async () => {
    const cases: [Record<string, unknown>, number, new (...args: never[]) => Error, string][] = [
      [{ model: 'vllm-model', messages: [{ role: 'user', content: 'hi' }] }, 400, Anthropic.BadRequestError, 'max_tokens'],
      [
        {
          model: 'vllm-model',
          max_tokens: 5,
          messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }],
        },
        400,
        Anthropic.BadRequestError,
        'image',
      ],
      [{ model: 'vllm-model', max_tokens: 5, top_k: 5, messages: [{ role: 'user', content: 'hi' }] }, 400, Anthropic.BadRequestError, 'top_k'],
      [
        {
          model: 'vllm-model',
          max_tokens: 5,
          tools: [{ type: 'web_search_20250305', name: 'web_search' }],
          messages: [{ role: 'user', content: 'hi' }],
        },
        400,
        Anthropic.BadRequestError,
        'web_search_20250305',
      ],
      [
        { model: 'vllm-model', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'nope', content: 'x' }] }] },
        400,
        Anthropic.BadRequestError,
        'tool_use_id',
      ],
      [{ model: 'nobody-serves-it', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }, 404, Anthropic.NotFoundError, 'nobody-serves-it'],
    ];
    for (const [body, status, cls, words] of cases) {
      const e = await client.messages.create(body as never).catch((x: unknown) => x);
      expect(e, JSON.stringify(body)).toBeInstanceOf(cls);
      expect(e).toMatchObject({ status, error: { type: 'error', error: { type: status === 404 ? 'not_found_error' : 'invalid_request_error' } } });
      expect((e as Error).message).toContain(words);
    }
    const badKey = await new Anthropic({ apiKey: 'uk_made_up', baseURL: url, maxRetries: 0 }).messages
      .create({ model: 'vllm-model', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] })
      .catch((x: unknown) => x);
    expect(badKey).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(badKey).toMatchObject({ status: 401, error: { type: 'error', error: { type: 'authentication_error' } } });
    const queued = await t.db.query<{ n: number }>(sql('t_messages_queued', "SELECT count(*)::int AS n FROM jobs WHERE state = 'queued'"));
    expect(queued).toEqual([{ n: 0 }]);
  });
});
