// The agent frameworks a new user reaches for, run unchanged on the Messages and Responses front
// doors (docs/front-doors.md), through the real app and real `ins worker`s (in process) on test
// backends that speak Ollama's and vLLM's wire (test/helpers/backends.ts), each as its own
// documentation shows it:
// - the Vercel AI SDK (`ai`) with `@ai-sdk/openai`'s default model `openai(id)`, which speaks the
//   Responses API: generateText, streamText (its textStream read to the end), a tool loop whose
//   tool runs here (stopWhen), plain and streamed, a conversation carried on with the answers'
//   messages (item_reference to the stored answers, the SDK's way while `store` is on), and
//   structured output from a zod schema (generateObject, generateText with Output.object);
// - the Vercel AI SDK with `@ai-sdk/anthropic` (the Messages API): the same, with structured
//   output as `output_config.format` and as the SDK's forced JSON tool;
// - the OpenAI Agents SDK (`@openai/agents`) with its default model (the Responses API) from an
//   OpenAIProvider pointed at the network, tracing off: an agent with one function tool runs to
//   its final output (plain, streamed, carried on by previousResponseId), and one with a zod
//   outputType.
// Every request any of them makes goes to this machine: the test records the others (none).
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { Agent, OpenAIProvider, Runner, setTracingDisabled, tool as agentTool } from '@openai/agents';
import { generateObject, generateText, isStepCount, Output, streamText, tool, type LanguageModel } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { backends } from './helpers/db.js';
import { startNetwork, type TestNetwork } from './helpers/network.js';

const KINDS = ['ollama', 'vllm'] as const;

/** The tool every framework runs here: the fake backend calls it, then echoes its result. */
const weatherOf = (city: string) => `Sunny in ${city}, 21 C`;

describe.each(backends)('agent frameworks on the front doors, on $name', (db) => {
  let net: TestNetwork<(typeof KINDS)[number]>;
  let url: string;
  let key: string;
  let fakes: TestNetwork<(typeof KINDS)[number]>['fakes'];
  // Requests to anywhere but this machine, from any library (tracing exporters, gateways…).
  const away: string[] = [];
  // The bodies the frameworks POST to /v1/responses, in order.
  const responsesBodies: Record<string, unknown>[] = [];
  const realFetch = globalThis.fetch;
  // The AI SDK's console warnings (e.g. the maxOutputTokens it assumes for a model it does not know), off while this file runs.
  const sdkWarnings = globalThis as { AI_SDK_LOG_WARNINGS?: unknown };
  const logWarnings = sdkWarnings.AI_SDK_LOG_WARNINGS;

  beforeAll(async () => {
    sdkWarnings.AI_SDK_LOG_WARNINGS = false;
    globalThis.fetch = (input, init) => {
      const target = new URL(input instanceof Request ? input.url : String(input));
      if (target.hostname !== '127.0.0.1' && target.hostname !== 'localhost') {
        away.push(target.href);
        return Promise.reject(new Error(`no network in this test: ${target.href}`));
      }
      if (target.pathname === '/v1/responses' && typeof init?.body === 'string')
        responsesBodies.push(JSON.parse(init.body) as Record<string, unknown>);
      return realFetch(input, init);
    };
    net = await startNetwork(db, KINDS);
    ({ url, fakes } = net);
    key = await net.t.addUser('frameworks');
  });
  afterAll(async () => {
    globalThis.fetch = realFetch;
    sdkWarnings.AI_SDK_LOG_WARNINGS = logWarnings;
    await net?.close();
    expect(away).toEqual([]);
  });

  /** Runs `body` with the kind's backend answering `get_weather` for `city` whenever tools are offered and the last message is not a tool result. */
  const withToolCall = async <T>(kind: (typeof KINDS)[number], city: string, body: () => Promise<T>): Promise<T> => {
    fakes[kind].toolCall = { name: 'get_weather', arguments: { city } };
    try {
      return await body();
    } finally {
      fakes[kind].toolCall = undefined;
    }
  };
  const weatherTool = () =>
    tool({
      description: 'The weather in a city',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => weatherOf(city),
    });

  /** generateText, streamText and a streamed tool loop, the same on either provider's door. */
  function plainCalls(kind: (typeof KINDS)[number], lm: () => LanguageModel): void {
    const model = `${kind}-model`;
    it('generateText', async () => {
      const r = await generateText({ model: lm(), system: 'Be terse.', prompt: 'Say hello', maxRetries: 0 });
      expect(r.text).toBe(`echo(${model}): Say hello`);
      expect(r.finishReason).toBe('stop');
      expect(r.usage.outputTokens).toBe(3);
      expect(fakes[kind].requests.at(-1)!.messages).toEqual([
        { role: 'system', content: 'Be terse.' },
        { role: 'user', content: 'Say hello' },
      ]);
    });

    it('streamText, its textStream read to the end', async () => {
      const r = streamText({ model: lm(), prompt: 'The quick brown fox', maxRetries: 0, onError: () => {} });
      let text = '';
      for await (const piece of r.textStream) text += piece;
      expect(text).toBe(`echo(${model}): The quick brown fox`);
      expect(await r.finishReason).toBe('stop');
      expect(await r.text).toBe(text);
    });

    it('a tool loop, streamed', async () => {
      const r = await withToolCall(kind, 'Lyon', async () => {
        const s = streamText({
          model: lm(),
          tools: { get_weather: weatherTool() },
          stopWhen: isStepCount(3),
          prompt: 'Weather in Lyon?',
          maxRetries: 0,
          onError: () => {},
        });
        let text = '';
        for await (const piece of s.textStream) text += piece;
        return { text, steps: await s.steps };
      });
      expect(r.steps).toHaveLength(2);
      expect(r.text).toBe(`echo(${model}): ${weatherOf('Lyon')}`);
    });
  }

  for (const kind of KINDS) {
    const model = `${kind}-model`;

    describe(`${kind}: the Vercel AI SDK with @ai-sdk/openai's default model (the Responses API)`, () => {
      const lm = (): LanguageModel => createOpenAI({ baseURL: `${url}/v1`, apiKey: key })(model);

      plainCalls(kind, lm);

      it('a tool loop: the call, the tool run here, its result answered (stopWhen)', async () => {
        const r = await withToolCall(kind, 'Paris', () =>
          generateText({ model: lm(), tools: { get_weather: weatherTool() }, stopWhen: isStepCount(3), prompt: 'Weather in Paris?', maxRetries: 0 }),
        );
        expect(r.steps).toHaveLength(2);
        expect(r.steps[0]!.toolCalls).toEqual([expect.objectContaining({ toolName: 'get_weather', input: { city: 'Paris' } })]);
        expect(r.steps[0]!.toolResults).toEqual([expect.objectContaining({ toolName: 'get_weather', output: weatherOf('Paris') })]);
        expect(r.text).toBe(`echo(${model}): ${weatherOf('Paris')}`);
        expect((fakes[kind].requests.at(-1)!.messages as { role: string }[]).map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
      });

      it('a conversation carried on with the messages of the answers before (as a chat app does: item_reference while store is on)', async () => {
        const first = await generateText({ model: lm(), messages: [{ role: 'user', content: 'Hello' }], maxRetries: 0 });
        const history = [{ role: 'user' as const, content: 'Hello' }, ...first.response.messages, { role: 'user' as const, content: 'And again' }];
        const second = streamText({ model: lm(), messages: history, maxRetries: 0, onError: () => {} });
        const reference = { type: 'item_reference', id: `msg_${first.response.id.slice(5)}` };
        expect(await second.text).toBe(`echo(${model}): And again`);
        expect(responsesBodies.at(-1)!.input).toContainEqual(reference);
        expect(fakes[kind].requests.at(-1)!.messages).toEqual([
          { role: 'user', content: 'Hello' },
          { role: 'assistant', content: `echo(${model}): Hello` },
          { role: 'user', content: 'And again' },
        ]);
        const third = await generateText({
          model: lm(),
          messages: [...history, ...(await second.response).messages, { role: 'user', content: 'Once more' }],
          maxRetries: 0,
        });
        expect(third.text).toBe(`echo(${model}): Once more`);
        expect((fakes[kind].requests.at(-1)!.messages as { content: string }[]).map((m) => m.content)).toEqual([
          'Hello',
          `echo(${model}): Hello`,
          'And again',
          `echo(${model}): And again`,
          'Once more',
        ]);
      });

      it('structured output from a zod schema: generateObject, and generateText with Output.object', async () => {
        const schema = z.object({ answer: z.string() });
        const o = await generateObject({ model: lm(), schema, prompt: 'Reply in JSON', maxRetries: 0 });
        expect(o.object).toEqual({ answer: `echo(${model}): Reply in JSON` });
        const g = await generateText({ model: lm(), output: Output.object({ schema }), prompt: 'Reply in JSON again', maxRetries: 0 });
        expect(g.output).toEqual({ answer: `echo(${model}): Reply in JSON again` });
      });
    });

    describe(`${kind}: the Vercel AI SDK with @ai-sdk/anthropic (the Messages API)`, () => {
      const lm = (): LanguageModel => createAnthropic({ baseURL: `${url}/v1`, apiKey: key })(model);

      plainCalls(kind, lm);

      it('a conversation carried on with the messages of the answer before', async () => {
        const first = await generateText({ model: lm(), messages: [{ role: 'user', content: 'Hello' }], maxRetries: 0 });
        const second = await generateText({
          model: lm(),
          messages: [{ role: 'user', content: 'Hello' }, ...first.response.messages, { role: 'user', content: 'And again' }],
          maxRetries: 0,
        });
        expect(second.text).toBe(`echo(${model}): And again`);
      });

      it('structured output from a zod schema as output_config.format (structuredOutputMode outputFormat)', async () => {
        const schema = z.object({ answer: z.string() });
        const g = await generateText({
          model: lm(),
          output: Output.object({ schema }),
          prompt: 'Reply in JSON',
          maxRetries: 0,
          providerOptions: { anthropic: { structuredOutputMode: 'outputFormat' } },
        });
        expect(g.output).toEqual({ answer: `echo(${model}): Reply in JSON` });
        const sent = fakes[kind].requests.at(-1)!;
        expect(kind === 'ollama' ? sent.format : sent.response_format).toMatchObject(
          kind === 'ollama' ? { type: 'object', required: ['answer'] } : { type: 'json_schema' },
        );
        const o = await generateObject({
          model: lm(),
          schema,
          prompt: 'Reply in JSON again',
          maxRetries: 0,
          providerOptions: { anthropic: { structuredOutputMode: 'outputFormat' } },
        });
        expect(o.object).toEqual({ answer: `echo(${model}): Reply in JSON again` });
      });

      it("structured output for a model it does not know: the SDK's JSON tool, forced (the tool_choice capability)", async () => {
        const ask = () =>
          generateText({ model: lm(), output: Output.object({ schema: z.object({ answer: z.string() }) }), prompt: 'Reply in JSON', maxRetries: 0 });
        if (kind === 'ollama') {
          // Ollama takes no tool_choice: a forced tool is refused by capability, as chat's is (docs/anthropic.md).
          await expect(ask()).rejects.toMatchObject({
            statusCode: 400,
            message: expect.stringContaining("'tool_choice' needs the capability 'tool_choice'"),
          });
          return;
        }
        fakes[kind].toolCall = { name: 'json', arguments: { answer: 'forty-two' } };
        try {
          expect((await ask()).output).toEqual({ answer: 'forty-two' });
        } finally {
          fakes[kind].toolCall = undefined;
        }
      });

      it('a tool loop: tool_use, the tool run here, its tool_result answered (stopWhen)', async () => {
        const r = await withToolCall(kind, 'Paris', () =>
          generateText({ model: lm(), tools: { get_weather: weatherTool() }, stopWhen: isStepCount(3), prompt: 'Weather in Paris?', maxRetries: 0 }),
        );
        expect(r.steps).toHaveLength(2);
        expect(r.steps[0]!.finishReason).toBe('tool-calls');
        expect(r.steps[0]!.toolResults).toEqual([expect.objectContaining({ toolName: 'get_weather', output: weatherOf('Paris') })]);
        expect(r.text).toBe(`echo(${model}): ${weatherOf('Paris')}`);
      });
    });

    describe(`${kind}: the OpenAI Agents SDK with its default model (the Responses API)`, () => {
      const runner = () => {
        setTracingDisabled(true);
        // The provider makes its OpenAI client (the `openai` the Agents SDK depends on) for the network's base URL.
        return new Runner({ modelProvider: new OpenAIProvider({ baseURL: `${url}/v1`, apiKey: key }), tracingDisabled: true });
      };
      const agent = () =>
        new Agent({
          name: 'Weather agent',
          instructions: 'Answer with the weather.',
          model,
          tools: [
            agentTool({
              name: 'get_weather',
              description: 'The weather in a city',
              parameters: z.object({ city: z.string() }),
              execute: async ({ city }) => weatherOf(city),
            }),
          ],
        });

      it('run() calls the function tool and ends with the echo of its result', async () => {
        const result = await withToolCall(kind, 'Paris', () => runner().run(agent(), 'Weather in Paris?'));
        expect(result.finalOutput).toBe(`echo(${model}): ${weatherOf('Paris')}`);
        expect(result.newItems.map((i) => i.type)).toEqual(['tool_call_item', 'tool_call_output_item', 'message_output_item']);
      });

      it('run() with a zod outputType (structured output), and a second turn on the history', async () => {
        const structured = new Agent({ name: 'Answerer', instructions: 'Answer in JSON.', model, outputType: z.object({ answer: z.string() }) });
        const first = await runner().run(structured, 'Reply in JSON');
        expect(first.finalOutput).toEqual({ answer: `echo(${model}): Reply in JSON` });
        const second = await runner().run(agent(), [...first.history, { role: 'user', content: 'Thanks' }]);
        expect(second.finalOutput).toBe(`echo(${model}): Thanks`);
      });

      it('run() carried on from the response before by previousResponseId (only the new items sent each turn)', async () => {
        const first = await runner().run(agent(), 'Hello');
        expect(first.lastResponseId).toMatch(/^resp_/);
        const before = responsesBodies.length;
        const second = await withToolCall(kind, 'Nice', () =>
          runner().run(agent(), 'Weather in Nice?', { previousResponseId: first.lastResponseId }),
        );
        expect(second.finalOutput).toBe(`echo(${model}): ${weatherOf('Nice')}`);
        const [call, answer] = responsesBodies.slice(before);
        expect(call).toMatchObject({
          previous_response_id: first.lastResponseId,
          input: [expect.objectContaining({ role: 'user', content: 'Weather in Nice?' })],
        });
        expect(answer).toMatchObject({
          previous_response_id: second.rawResponses[0]!.responseId,
          input: [expect.objectContaining({ type: 'function_call_output', output: weatherOf('Nice') })],
        });
        expect((fakes[kind].requests.at(-1)!.messages as { role: string }[]).map((m) => m.role)).toEqual([
          'system',
          'user',
          'assistant',
          'user',
          'assistant',
          'tool',
        ]);
      });

      it('run() streamed', async () => {
        const result = await withToolCall(kind, 'Lyon', async () => {
          const s = await runner().run(agent(), 'Weather in Lyon?', { stream: true });
          let text = '';
          for await (const piece of s.toTextStream()) text += piece;
          await s.completed;
          return { text, s };
        });
        expect(result.s.finalOutput).toBe(`echo(${model}): ${weatherOf('Lyon')}`);
        expect(result.text).toBe(`echo(${model}): ${weatherOf('Lyon')}`);
      });
    });
  }

  it('sent nothing beyond this machine (no tracing exporter, no gateway)', () => {
    expect(away).toEqual([]);
  });
});
