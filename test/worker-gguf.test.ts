// `ins worker --backend gguf` (src/worker/gguf.ts) against the real app, on both database
// backends, through the recording proxy (test/helpers/tap.ts), with a real tiny model
// (scripts/tiny-gguf.ts) run by llama.cpp in this process: jobs answered from the file,
// streamed as progress, with the model's own token counts; the same job the same answer
// (greedy, or sampled with the same seed); an answer another node began is continued.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser } from './helpers/coordinator.js';
import { startTap, type Tap } from './helpers/tap.js';
import { startWorker, until, type InProcessWorker } from './helpers/worker.js';
import { tinyModels } from './helpers/gguf.js';
import { Gguf } from '../src/worker/gguf.js';
import { requestErrorOf } from '../src/worker/backend.js';
import { sql } from '../src/db/database.js';
import { CLEAN_EXIT, startWorkerProcess, stopped } from './helpers/process.js';

const models = tinyModels();
afterAll(() => models.remove());
const MODEL = 'tiny:honest';

describe.each(backends)('ins worker --backend gguf and the coordinator ($name)', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let tap: Tap;
  let user: TestUser;
  let w: InProcessWorker;
  // The same file run directly: what the worker must have answered.
  const direct = () => new Gguf(models.file({ seed: 1 }), MODEL, true, 1, 1);

  beforeAll(async () => {
    t = await startApp(backend);
    tap = await startTap(await t.app.listen({ port: 0, host: '127.0.0.1' }));
    user = new TestUser(t.app, await t.addUser());
    w = await startWorker({
      server: tap.url,
      node: 'cpu-1',
      key: await t.addNode('cpu-1'),
      backend: 'gguf',
      backendUrl: '',
      modelFile: models.file({ seed: 1 }),
      models: [MODEL],
      threads: 1,
    });
  });
  afterAll(async () => {
    await w?.stop();
    await tap?.close();
    await t?.close();
  });

  const result = (jobId: string) =>
    user.resultWhenDone<{ status: string; result: { message: { content: string } }; usage?: { prompt_tokens?: number; completion_tokens?: number } }>(
      jobId,
    );

  it('declares the name it serves the file as, and says what it runs', () => {
    expect(w.logs.some((l) => l.includes('models declared') && l.includes(MODEL))).toBe(true);
    expect(w.logs.some((l) => l.includes('backend: GGUF'))).toBe(true);
  });

  it("answers a job from the model, streamed, with the model's token counts; the same job twice the same answer", async () => {
    const messages = [{ role: 'user', content: 'Tell me about the river.' }];
    const expected = await direct().chat({ model: MODEL, messages, max_output: 24, temperature: 0 });
    expect(expected.usage?.completion_tokens).toBeGreaterThan(0);
    for (let i = 0; i < 2; i++) {
      const id = await user.submit(MODEL, messages[0]!.content, { max_output: 24 });
      const r = await result(id);
      expect(r.status).toBe('success');
      expect(r.result.message.content).toBe(expected.content);
      expect(r.usage).toMatchObject(expected.usage!);
      // What went out as progress is the answer's beginning (the rest is in the report).
      await until('the report', () => tap.reports.some((p) => p.job_id === id));
      expect(
        expected.content.startsWith(
          tap.progress
            .filter((p) => p.job_id === id)
            .map((p) => p.delta)
            .join(''),
        ),
      ).toBe(true);
    }
  });

  it("samples with the job's temperature and seed: the same seed the same answer, another seed another", async () => {
    const run = async (seed: number) =>
      (await result(await user.submit(MODEL, 'Write a line.', { max_output: 32, temperature: 1.5, seed }))).result.message.content;
    const a = await run(11);
    expect(await run(11)).toBe(a);
    expect(await run(12)).not.toBe(a);
  });

  it("refuses a prompt longer than the context as the request's own error, coded context_length_exceeded like the other backends'", async () => {
    const err = await direct()
      .chat({ model: MODEL, messages: [{ role: 'user', content: 'river '.repeat(6_000) }], max_output: 8, temperature: 0 })
      .catch((e: unknown) => e);
    expect(requestErrorOf(err)).toMatchObject({ code: 'context_length_exceeded' });
  });

  it('continues an answer another node began (the coordinator hands its beginning as answer_prefix)', async () => {
    const messages = [{ role: 'user', content: 'Continue this.' }];
    const whole = (await direct().chat({ model: MODEL, messages, max_output: 30, temperature: 0 })).content;
    const prefix = whole.slice(0, 10);
    tap.jobData = () => ({ answer_prefix: prefix });
    try {
      const r = await result(await user.submit(MODEL, messages[0]!.content, { max_output: 30 }));
      // Greedy from the same tokens: the continuation is the rest of the same answer.
      expect(r.result.message.content.startsWith(prefix)).toBe(true);
      expect(r.result.message.content.slice(0, whole.length)).toBe(whole.slice(0, r.result.message.content.length));
    } finally {
      tap.jobData = undefined;
    }
  });

  it('says "length" when it stops at max_output, a continuation too (whose count is its own alone, so the service cannot tell)', async () => {
    const messages = [{ role: 'user', content: 'Continue this.' }];
    const cut = await direct().chat({ model: MODEL, messages, max_output: 6, temperature: 0 });
    expect(cut).toMatchObject({ usage: { completion_tokens: 6 }, finish_reason: 'length' });
    const continued = await direct().chat({ model: MODEL, messages, max_output: 4, temperature: 0, prefix: cut.content });
    expect(continued).toMatchObject({ usage: { completion_tokens: 4 }, finish_reason: 'length' });
  });
});

describe('--backend gguf with a file that is not a model', () => {
  it('fails to start, saying which file', async () => {
    const g = new Gguf('/nonexistent/model.gguf', 'x', true);
    await expect(g.detect()).rejects.toThrow(/cannot load \/nonexistent\/model\.gguf/);
  });
});

describe('ins worker --backend gguf as a process', () => {
  it('on SIGTERM deregisters and exits 0 (signal-exit, loaded with node-llama-cpp, killed it with 143 before)', async () => {
    const t = await startApp(backends[0]!);
    try {
      const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
      const w = startWorkerProcess(
        ['--server', url, '--node', 'gguf-proc', '--backend', 'gguf', '--model-file', models.file({ seed: 1 }), '--models', MODEL, '--threads', '1'],
        { INS_NODE_KEY: await t.addNode('gguf-proc') },
      );
      await expect.poll(() => w.logs(), { timeout: 60_000 }).toContain('models declared');
      expect(await stopped(w), w.logs()).toEqual(CLEAN_EXIT);
      expect(w.logs()).toContain('deregistered');
      const [session] = await t.db.query<{ ended: boolean }>(
        sql(
          't_gguf_session',
          "SELECT ended_at IS NOT NULL AS ended FROM node_sessions s JOIN nodes n ON n.id = s.node_id WHERE n.name = 'gguf-proc'",
        ),
      );
      expect(session).toEqual({ ended: true });
    } finally {
      await t.close();
    }
  });
});
