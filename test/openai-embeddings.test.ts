// Issue 28, POST /v1/embeddings with the official `openai` SDK, through the real app and the real
// `ins worker` (in process) on stub backends that speak Ollama's (/api/embed, /api/show
// `embedding`) and vLLM's (/v1/embeddings) wire (test/helpers/backends.ts): one job per batch,
// answered as OpenAI's list of embeddings, as floats or base64; only nodes that declared
// `embeddings` for the model get such a job — never one without it, never the seed's worker.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { bitsOf } from '../src/jobs/capabilities.js';
import { setKeyQuota } from '../src/nodes/api-keys.js';
import { eligibleNodes } from '../src/verify/copies.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { startFakeBackend, vectorOf } from './helpers/backends.js';
import { startWorker } from './helpers/worker.js';
import { startNetwork, type TestNetwork } from './helpers/network.js';
import { TestWorker } from './helpers/coordinator.js';

const base64Of = (v: number[]) => Buffer.from(new Float32Array(v).buffer).toString('base64');

describe.each(backends)('POST /v1/embeddings on $name', (db) => {
  let net: TestNetwork<'ollama' | 'vllm'>;
  let t: TestNetwork<'ollama' | 'vllm'>['t'];
  let client: OpenAI;
  let url: string;
  let fakes: TestNetwork<'ollama' | 'vllm'>['fakes'];

  beforeAll(async () => {
    net = await startNetwork(db, ['ollama', 'vllm'] as const, 'embed', (f) => {
      f.showCapabilities = ['embedding'];
      f.embeds = true;
    });
    ({ t, url, fakes } = net);
    client = new OpenAI({ apiKey: await t.addUser('sdk'), baseURL: `${url}/v1`, maxRetries: 0 });
  });
  afterAll(() => net.close());

  it('a scoring Ollama declares no score for its embedding model, a generative one beside it does; 40 slots register at the capacity limit', async () => {
    // Ollama 0.12.11 has logprobs: its worker can score (declares `score`), but not with a model that generates nothing.
    const b = await startFakeBackend('ollama', ['scoring-embed'], { version: '0.12.11' });
    b.showCapabilities = ['embedding'];
    const generative = await startFakeBackend('ollama', ['scoring-chat'], { version: '0.12.11' });
    const started = [
      await startWorker({
        server: url,
        node: 'scoring-embed-node',
        key: await t.addNode('scoring-embed-node'),
        backend: 'ollama',
        backendUrl: b.url,
        concurrency: 40,
      }),
      await startWorker({
        server: url,
        node: 'scoring-chat-node',
        key: await t.addNode('scoring-chat-node'),
        backend: 'ollama',
        backendUrl: generative.url,
      }),
    ];
    try {
      const rows = await t.db.query<{ node: string; capacity: number; caps: number[] }>(
        sql(
          't_embed_caps',
          `SELECT n.name AS node, s.capacity, s.model_caps AS caps
        FROM node_sessions s JOIN nodes n ON n.id = s.node_id WHERE n.name IN ('scoring-embed-node', 'scoring-chat-node') AND s.ended_at IS NULL ORDER BY n.name`,
        ),
      );
      // register_node takes at most 64: 2 × 40 slots would be refused (422), and the worker would never run.
      expect(rows).toEqual([
        { node: 'scoring-chat-node', capacity: 2, caps: [bitsOf(['sampling', 'json', 'tools', 'logprobs', 'completions', 'score'])] },
        { node: 'scoring-embed-node', capacity: 64, caps: [bitsOf(['embeddings'])] },
      ]);
    } finally {
      for (const w of started) await w.stop();
      await b.close();
      await generative.close();
    }
  });

  it('lists embeddings among the capabilities of models whose nodes declared it', async () => {
    const caps = Object.fromEntries((await client.models.list()).data.map((m) => [m.id, (m as unknown as { capabilities: string[] }).capabilities]));
    expect(caps['ollama-embed']).toContain('embeddings');
    // Ollama's embedding model (`embedding` alone in /api/show) is declared with nothing else: it generates no text, so no chat either.
    expect(caps['ollama-embed']).toEqual(['embeddings']);
    expect(caps['vllm-embed']).toEqual(expect.arrayContaining(['chat', 'embeddings']));
    expect(await client.models.retrieve('ollama-embed')).toMatchObject({ id: 'ollama-embed', capabilities: ['embeddings'] });
  });

  it('refuses a chat completion for an embedding model with 404 model_not_chat, streamed or not; nothing is queued, and no probe checks it', async () => {
    for (const stream of [false, true]) {
      const e = await client.chat.completions
        .create({ model: 'ollama-embed', messages: [{ role: 'user', content: 'hi' }], stream } as never)
        .catch((x: unknown) => x);
      expect(e, `stream: ${stream}`).toBeInstanceOf(OpenAI.NotFoundError);
      expect(e).toMatchObject({ status: 404, param: 'model', code: 'model_not_chat' });
    }
    const queued = await t.db.query<{ n: number }>(
      sql('t_embed_chat_queued', "SELECT count(*)::int AS n FROM jobs WHERE model_id = (SELECT id FROM models WHERE name = 'ollama-embed')"),
    );
    expect(queued).toEqual([{ n: 0 }]);
    // Probes are chat jobs: those drawn from the models served for chat, which the vLLM one is (it declares chat's capabilities too).
    const eligible = await eligibleNodes(t.db, null, 60, 3600);
    const ids = await t.db.query<{ name: string; id: number }>(
      sql('t_embed_model_ids', "SELECT name, id FROM models WHERE name IN ('ollama-embed', 'vllm-embed')"),
    );
    const id = Object.fromEntries(ids.map((r) => [r.name, r.id]));
    expect(eligible.has(id['vllm-embed']!)).toBe(true);
    expect(eligible.has(id['ollama-embed']!)).toBe(false);
  });

  for (const kind of ['ollama', 'vllm'] as const) {
    it(`${kind}: embeds one input as floats, with usage`, async () => {
      const model = `${kind}-embed`;
      const r = await client.embeddings.create({ model, input: 'hello there world', encoding_format: 'float' });
      expect(r).toEqual({
        object: 'list',
        model,
        data: [{ object: 'embedding', index: 0, embedding: vectorOf('hello there world') }],
        usage: { prompt_tokens: 3, total_tokens: 3 },
      });
      expect(fakes[kind].requests.at(-1)).toMatchObject({ model, input: ['hello there world'] });
    });

    it(`${kind}: embeds several inputs in one job, in order, as base64 and as the SDK's default`, async () => {
      const model = `${kind}-embed`;
      const input = ['one', 'two words', 'and three words'];
      const calls = fakes[kind].calls;
      const b = await client.embeddings.create({ model, input, encoding_format: 'base64' });
      expect(b.data.map((d) => d.embedding)).toEqual(input.map((text) => base64Of(vectorOf(text))));
      expect(b.data.map((d) => d.index)).toEqual([0, 1, 2]);
      expect(b.usage).toEqual({ prompt_tokens: 6, total_tokens: 6 });
      expect(fakes[kind].calls).toBe(calls + 1);
      expect(fakes[kind].requests.at(-1)).toMatchObject({ input });
      // The SDK asks for base64 when the caller names no format, and decodes it.
      const d = await client.embeddings.create({ model, input });
      expect(d.data.map((x) => x.embedding)).toEqual(input.map(vectorOf));
    });
  }

  it('refuses what it cannot honour by name, and a model nobody serves with 404; nothing is queued', async () => {
    const cases: [Record<string, unknown>, number, string, string][] = [
      [{ model: 'vllm-embed', input: 'x', dimensions: 2 }, 400, 'dimensions', 'unsupported_parameter'],
      [{ model: 'vllm-embed', input: 'x', encoding_format: 'int8' }, 400, 'encoding_format', 'invalid_value'],
      [{ model: 'vllm-embed', input: [] }, 400, 'input', 'invalid_value'],
      [{ model: 'vllm-embed', input: ['a', ''] }, 400, 'input', 'invalid_value'],
      [{ model: 'vllm-embed', input: [1, 2, 3] }, 400, 'input', 'invalid_type'],
      [{ model: 'vllm-embed' }, 400, 'input', 'missing_required_parameter'],
      [{ model: 'nobody-serves-it', input: 'x' }, 404, 'model', 'model_not_found'],
    ];
    for (const [body, status, param, code] of cases) {
      const e = await client.embeddings.create(body as never).catch((x: unknown) => x);
      expect(e, JSON.stringify(body)).toBeInstanceOf(OpenAI.APIError);
      expect(e, JSON.stringify(body)).toMatchObject({ status, param, code });
    }
    const queued = await t.db.query<{ n: number }>(sql('t_embeddings_queued', "SELECT count(*)::int AS n FROM jobs WHERE state = 'queued'"));
    expect(queued).toEqual([{ n: 0 }]);
  });

  it("gives the job only to a node that declared embeddings: never to one without it, never to the seed's worker; none online: 400 at once", async () => {
    const without = await startFakeBackend('ollama', ['shared-model']); // lists completion and tools, not embedding
    const withIt = await startFakeBackend('ollama', ['shared-model']);
    withIt.showCapabilities = ['embedding'];
    const nodes = [
      await startWorker({ server: url, node: 'no-embeddings', key: await t.addNode('no-embeddings'), backend: 'ollama', backendUrl: without.url }),
    ];
    const seed = await new TestWorker(t.app, 'seed-node', await t.addNode('seed-node')).start(['shared-model']);
    try {
      const refused = await client.embeddings.create({ model: 'shared-model', input: 'x' }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
      expect(refused).toMatchObject({ status: 400, code: 'unsupported_parameter', param: 'input' });
      nodes.push(
        await startWorker({
          server: url,
          node: 'embeddings-node',
          key: await t.addNode('embeddings-node'),
          backend: 'ollama',
          backendUrl: withIt.url,
        }),
      );
      const polled = seed.getJob(3);
      for (let i = 0; i < 3; i++) {
        const r = await client.embeddings.create({ model: 'shared-model', input: [`text ${i}`], encoding_format: 'float' });
        expect(r.data[0]!.embedding).toEqual(vectorOf(`text ${i}`));
      }
      // The requests are answered: its deregistration ends the poll that waited through them
      // (a waiting poll answers at once, with no job), rather than its 3 s running out.
      expect((await seed.deregister()).statusCode).toBe(200);
      expect(await polled).toBeNull();
      expect(without.requests.filter((r) => 'input' in r)).toEqual([]);
      expect(withIt.requests.filter((r) => 'input' in r)).toHaveLength(3);
    } finally {
      for (const n of nodes) await n.stop();
      await without.close();
      await withIt.close();
    }
  });
});

describe.each(backends)("an embeddings answer reported beside the seed's string message on $name", (db) => {
  it('takes the vectors beside {"message": ""} as beside the object form', async () => {
    const t = await startApp(db, { coordinator: { sweepInterval: 0.2 } });
    const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const w = await new TestWorker(t.app, 'string-node', await t.addNode('string-node')).start([]);
      expect(
        (
          await w.post(
            '/worker/update_models',
            { node_url: 'string-node', models: ['str-embed'], capabilities: { 'str-embed': ['embeddings'] } },
            true,
          )
        ).statusCode,
      ).toBe(200);
      const client = new OpenAI({ apiKey: await t.addUser('sdk'), baseURL: `${url}/v1`, maxRetries: 0 });
      const pending = client.embeddings.create({ model: 'str-embed', input: ['a', 'b c'], encoding_format: 'float' });
      const job = (await w.getJob(10))!;
      const reported = await w.post('/worker/update_result', {
        job_id: job.job_id,
        api_key: job.api_key,
        model_name: job.model,
        status: 'success',
        result: { message: '', embeddings: [base64Of(vectorOf('a')), base64Of(vectorOf('b c'))] },
      });
      expect(reported.statusCode).toBe(200);
      expect((await pending).data.map((d) => d.embedding)).toEqual([vectorOf('a'), vectorOf('b c')]);
    } finally {
      await t.close();
    }
  });
});

describe.each(backends)('embeddings under a token quota on $name', (db) => {
  it('reserve no output tokens and are charged none: a key with 50 tokens left embeds, whatever count its node claims', async () => {
    const t = await startApp(db, { coordinator: { sweepInterval: 0.2 } });
    const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const w = await new TestWorker(t.app, 'quota-embed-node', await t.addNode('quota-embed-node')).start([]);
      expect(
        (
          await w.post(
            '/worker/update_models',
            { node_url: 'quota-embed-node', models: ['q-embed'], capabilities: { 'q-embed': ['embeddings'] } },
            true,
          )
        ).statusCode,
      ).toBe(200);
      const key = await t.addUser('small-quota');
      await setKeyQuota(t.db, 'small-quota', undefined, 50);
      const client = new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
      // Before, it reserved QUOTA_RESERVE_TOKENS (1024), more than the whole quota: 400 max_tokens_over_quota.
      const pending = client.embeddings.create({ model: 'q-embed', input: 'a', encoding_format: 'float' });
      const job = (await w.getJob(10))!;
      const reported = await w.post('/worker/update_result', {
        job_id: job.job_id,
        api_key: job.api_key,
        model_name: job.model,
        status: 'success',
        result: { message: '', embeddings: [base64Of(vectorOf('a'))] },
        usage: { prompt_tokens: 1, completion_tokens: 40 },
      });
      expect(reported.statusCode).toBe(200);
      expect((await pending).data.map((d) => d.embedding)).toEqual([vectorOf('a')]);
      await t.app.service.usage.settle();
      const usage = (await t.app.inject({ method: 'GET', url: '/usage', headers: { api_key: key } })).json<{ used: unknown }>();
      expect(usage.used).toEqual({ jobs: 1, tokens: 0 });
    } finally {
      await t.close();
    }
  });
});

describe.each(backends)('an embeddings answer larger than BODY_LIMIT on $name', (db) => {
  it("fails the job at once as the request's own error, 400 answer_too_large, rather than at its deadline", async () => {
    // 16 KiB takes the request (2,000 one-letter inputs, about 8 KB) but not its answer (about 56 KB of base64 vectors).
    const t = await startApp(db, { bodyLimit: 16 * 1024, coordinator: { sweepInterval: 0.2 } });
    const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    const fake = await startFakeBackend('ollama', ['big-embed']);
    fake.showCapabilities = ['embedding'];
    const w = await startWorker({ server: url, node: 'big-node', key: await t.addNode('big-node'), backend: 'ollama', backendUrl: fake.url });
    try {
      const client = new OpenAI({ apiKey: await t.addUser('sdk'), baseURL: `${url}/v1`, maxRetries: 0 });
      const err = await client.embeddings
        .create({ model: 'big-embed', input: Array.from({ length: 2_000 }, () => 'x'), request_timeout_time: 600 } as never)
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err).toMatchObject({ status: 400, code: 'answer_too_large' });
      expect((err as Error).message).toMatch(/BODY_LIMIT/);
      // A smaller batch on the same node is answered.
      expect((await client.embeddings.create({ model: 'big-embed', input: ['a b'] })).data[0]!.embedding).toEqual(vectorOf('a b'));
    } finally {
      await w.stop();
      await fake.close();
      await t.close();
    }
  });
});
