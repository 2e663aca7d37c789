// Issue 28, POST /v1/completions with the official `openai` SDK, through the real app and the
// real `ins worker` (in process) on stub backends that speak Ollama's (/api/generate, raw) and
// vLLM's (/v1/completions) wire (test/helpers/backends.ts): answered and streamed as
// `text_completion`s with usage; only nodes that declared `completions` for the model get such
// a job — never a node without it, never the seed's worker; no such node: 400 at once.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { backends } from './helpers/db.js';
import { startFakeBackend } from './helpers/backends.js';
import { startWorker } from './helpers/worker.js';
import { startNetwork, type TestNetwork } from './helpers/network.js';
import { TestWorker } from './helpers/coordinator.js';

describe.each(backends)('POST /v1/completions on $name', (db) => {
  let net: TestNetwork<'ollama' | 'vllm'>;
  let t: TestNetwork<'ollama' | 'vllm'>['t'];
  let client: OpenAI;
  let url: string;
  let fakes: TestNetwork<'ollama' | 'vllm'>['fakes'];

  beforeAll(async () => {
    net = await startNetwork(db, ['ollama', 'vllm'] as const);
    ({ t, url, fakes } = net);
    client = new OpenAI({ apiKey: await t.addUser('sdk'), baseURL: `${url}/v1`, maxRetries: 0 });
  });
  afterAll(() => net.close());

  it('lists completions among the capabilities of models whose nodes declared it', async () => {
    const caps = Object.fromEntries((await client.models.list()).data.map((m) => [m.id, (m as unknown as { capabilities: string[] }).capabilities]));
    expect(caps['ollama-model']).toContain('completions');
    expect(caps['vllm-model']).toContain('completions');
  });

  for (const kind of ['ollama', 'vllm'] as const) {
    it(`${kind}: answers a text_completion with usage; the prompt reaches the backend raw, with the sampling fields in its form`, async () => {
      const model = `${kind}-model`;
      const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 30, stop: ['END'], top_p: 0.5, seed: 3 });
      expect(r).toMatchObject({
        object: 'text_completion',
        model,
        choices: [{ index: 0, text: `echo(${model}): Once upon a time`, finish_reason: 'stop', logprobs: null }],
      });
      expect(r.id).toMatch(/^cmpl-/);
      expect(r.usage).toEqual({ prompt_tokens: 4, completion_tokens: 5, total_tokens: 9 });
      const sent = fakes[kind].requests.at(-1)!;
      if (kind === 'ollama') {
        expect(sent).toMatchObject({
          model,
          prompt: 'Once upon a time',
          raw: true,
          stream: false,
          options: { num_predict: 30, stop: ['END'], top_p: 0.5, seed: 3 },
        });
        expect(sent.options).not.toHaveProperty('temperature');
      } else {
        expect(sent).toMatchObject({ model, prompt: 'Once upon a time', max_tokens: 30, stop: ['END'], top_p: 0.5, seed: 3 });
        expect(sent).not.toHaveProperty('temperature');
        expect(sent).not.toHaveProperty('messages');
      }
    });

    it(`${kind}: streams text_completion chunks, a finish_reason and the usage`, async () => {
      const model = `${kind}-model`;
      const s = await client.completions.create({
        model,
        prompt: ['The quick brown fox'],
        stream: true,
        stream_options: { include_usage: true },
        temperature: 0.2,
      });
      const chunks: OpenAI.Completion[] = [];
      for await (const c of s) chunks.push(c);
      expect(chunks.every((c) => c.object === 'text_completion')).toBe(true);
      expect(chunks.map((c) => c.choices[0]?.text ?? '').join('')).toBe(`echo(${model}): The quick brown fox`);
      expect(chunks.flatMap((c) => c.choices.map((x) => x.finish_reason)).filter(Boolean)).toEqual(['stop']);
      expect(chunks.at(-1)!.usage).toEqual({ prompt_tokens: 4, completion_tokens: 5, total_tokens: 9 });
      // Every chunk before it says `usage: null`, as OpenAI's stream options promise.
      expect(chunks.slice(0, -1).map((c) => c.usage)).toEqual(chunks.slice(0, -1).map(() => null));
      expect(fakes[kind].requests.at(-1)).toMatchObject({ prompt: 'The quick brown fox', stream: true });
    });
  }

  it('refuses what it cannot honour by name, and a model nobody serves with 404; nothing is queued', async () => {
    const cases: [Record<string, unknown>, number, string, string][] = [
      [{ model: 'vllm-model', prompt: ['one', 'two'], stream: true }, 400, 'prompt', 'unsupported_parameter'],
      [{ model: 'vllm-model', prompt: [] }, 400, 'prompt', 'empty_array'],
      [{ model: 'vllm-model', prompt: [1, 2, 3] }, 400, 'prompt', 'invalid_type'],
      [{ model: 'vllm-model' }, 400, 'prompt', 'missing_required_parameter'],
      [{ model: 'vllm-model', prompt: 'x', n: 2 }, 400, 'n', 'unsupported_parameter'],
      [{ model: 'vllm-model', prompt: 'x', echo: true }, 400, 'echo', 'unsupported_parameter'],
      [{ model: 'vllm-model', prompt: 'x', logprobs: 2 }, 400, 'logprobs', 'unsupported_parameter'],
      // 0 asks for the chosen tokens' logprobs (OpenAI's reference): refused, not dropped.
      [{ model: 'vllm-model', prompt: 'x', logprobs: 0 }, 400, 'logprobs', 'unsupported_parameter'],
      [
        { model: 'vllm-model', prompt: 'x', stream: true, stream_options: { include_usage: 'yes' } },
        400,
        'stream_options.include_usage',
        'invalid_type',
      ],
      [{ model: 'vllm-model', prompt: 'x', suffix: 'end' }, 400, 'suffix', 'unsupported_parameter'],
      [{ model: 'vllm-model', prompt: 'x', best_of: 3 }, 400, 'best_of', 'unsupported_parameter'],
      [{ model: 'vllm-model', prompt: 'x', logit_bias: { 1: 2 } }, 400, 'logit_bias', 'unsupported_parameter'],
      [{ model: 'nobody-serves-it', prompt: 'x' }, 404, 'model', 'model_not_found'],
    ];
    for (const [body, status, param, code] of cases) {
      const e = await client.completions.create(body as never).catch((x: unknown) => x);
      expect(e, JSON.stringify(body)).toBeInstanceOf(OpenAI.APIError);
      expect(e, JSON.stringify(body)).toMatchObject({ status, param, code });
    }
    const queued = await t.db.query<{ n: number }>(sql('t_completions_queued', "SELECT count(*)::int AS n FROM jobs WHERE state = 'queued'"));
    expect(queued).toEqual([{ n: 0 }]);
  });

  it("gives the job only to a node that declared completions: never to one without it, never to the seed's worker; none online: 400 at once", async () => {
    const without = await startFakeBackend('ollama', ['shared-model']);
    without.showCapabilities = ['tools']; // a model Ollama cannot complete (an embedding model lists `embedding` only)
    const withIt = await startFakeBackend('vllm', ['shared-model']);
    const nodes = [
      await startWorker({ server: url, node: 'no-completions', key: await t.addNode('no-completions'), backend: 'ollama', backendUrl: without.url }),
    ];
    const seed = await new TestWorker(t.app, 'seed-node', await t.addNode('seed-node')).start(['shared-model']);
    try {
      // Only the node without the capability and the seed's worker serve it: refused at once.
      const refused = await client.completions.create({ model: 'shared-model', prompt: 'x' }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
      expect(refused).toMatchObject({ status: 400, code: 'unsupported_parameter', param: 'prompt' });
      nodes.push(
        await startWorker({
          server: url,
          node: 'completions-node',
          key: await t.addNode('completions-node'),
          backend: 'vllm',
          backendUrl: withIt.url,
        }),
      );
      const polled = seed.getJob(3);
      for (let i = 0; i < 3; i++) {
        const r = await client.completions.create({ model: 'shared-model', prompt: `prompt ${i}` });
        expect(r.choices[0]!.text).toBe(`echo(shared-model): prompt ${i}`);
      }
      // The requests are answered: its deregistration ends the poll that waited through them
      // (a waiting poll answers at once, with no job), rather than its 3 s running out.
      expect((await seed.deregister()).statusCode).toBe(200);
      expect(await polled).toBeNull();
      expect(without.requests.filter((r) => 'prompt' in r)).toEqual([]);
      expect(withIt.requests.filter((r) => 'prompt' in r)).toHaveLength(3);
    } finally {
      for (const n of nodes) await n.stop();
      await without.close();
      await withIt.close();
    }
  });
});
