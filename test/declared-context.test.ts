// Request errors judged against the context a node declared (issue 53; docs/verification.md,
// "Request-error claims"; src/jobs/context.ts). The attack: a user sends prompts longer than a
// smaller-context node holds; the node honestly refuses them, a node with a longer context
// answers the audit's copy, and each claim was a `false_request_error` strike — suspended at the
// third, its points reversed, the user's jobs failed. Now nodes declare their context with their
// models (`ins worker`: the gguf file's loaded context, vLLM's max_model_len), a job estimated
// longer than a node's context is never given to it, a request longer than every online node's
// gets an immediate 400, and a claim is audited only when the declaration covered the request.
// Real app, real `ins worker` nodes (a tiny GGUF model run by llama.cpp, a vLLM-faced test
// backend), both databases.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { startFakeBackend, type FakeBackend } from './helpers/backends.js';
import { startWorker, until, type InProcessWorker } from './helpers/worker.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { tinyModels } from './helpers/gguf.js';
import { showJob } from '../src/jobs/operator.js';

const models = tinyModels();
afterAll(() => models.remove());
const MODEL = 'tiny:chat';
/** The gguf worker loads the tiny model with its trained context (scripts/tiny-gguf.ts TINY.context). */
const SMALL = 1024;
const LARGE = 8192;

describe.each(backends)('declared contexts on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let user: TestUser;
  let large: FakeBackend;
  const workers: InProcessWorker[] = [];

  beforeAll(async () => {
    // Verification on, no probes and no random copies: the only copies are request-error audits.
    // (Replay and speed checks off: the test backend answers every prompt alike and at once, which they rightly find suspicious.)
    t = await startApp(backend, {
      coordinator: { sweepInterval: 0.2 },
      verify: { enabled: true, probeInterval: 0, share: 0, minWordsForReplay: 1_000_000, maxTokensPerSecond: 0 },
    });
    const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    user = new TestUser(t.app, await t.addUser());
    workers.push(
      await startWorker({
        server: url,
        node: 'small',
        key: await t.addNode('small'),
        backend: 'gguf',
        backendUrl: '',
        modelFile: models.file({ seed: 7 }),
        models: [MODEL],
        threads: 1,
      }),
    );
    large = await startFakeBackend('vllm', [MODEL]);
    large.maxModelLen = LARGE;
    workers.push(await startWorker({ server: url, node: 'large', key: await t.addNode('large'), backend: 'vllm', backendUrl: large.url }));
  }, 60_000);
  afterAll(async () => {
    for (const w of workers) await w.stop();
    await large?.close();
    await t?.close();
  });

  const q = <R>(name: string, text: string, values: unknown[] = []) => t.db.query<R>(sql(name, text), values);
  const strikes = () =>
    q<{ node: string; kind: string }>(
      't_strikes',
      'SELECT n.name AS node, s.kind FROM node_strikes s JOIN nodes n ON n.id = s.node_id ORDER BY s.id',
    );
  const suspended = () =>
    q<{ node: string }>('t_suspended', "SELECT n.name AS node FROM node_standing s JOIN nodes n ON n.id = s.node_id WHERE s.state = 'suspended'");
  const jobCount = async () => (await q<{ n: number }>('t_jobs', 'SELECT count(*)::int AS n FROM jobs'))[0]!.n;
  const end = async (id: string) => {
    let body: { status: string; detail?: string } = { status: 'queued' };
    await until(`job ${id} to end`, async () => ['success', 'failed'].includes((body = (await user.result(id)).json()).status), 30_000);
    return body;
  };

  it("each node declares its context with its model: the gguf file's loaded context, vLLM's max_model_len", async () => {
    const rows = await q<{ node: string; contexts: number[] }>(
      't_contexts',
      'SELECT n.name AS node, s.model_contexts AS contexts FROM node_sessions s JOIN nodes n ON n.id = s.node_id WHERE s.ended_at IS NULL ORDER BY n.name',
    );
    expect(rows).toEqual([
      { node: 'large', contexts: [LARGE] },
      { node: 'small', contexts: [SMALL] },
    ]);
  });

  it("the attack: three prompts longer than the small node's context are never given to it, and the large node answers them; nobody is struck", async () => {
    // About 5,000 tokens for the tiny model's one-token-a-character vocabulary: more than the
    // small node's 1,024 (it would refuse them, honestly), within the large node's 8,192.
    // Submitted together, so that on the code before issue 53 both waiting nodes were handed one.
    const prompts = [0, 1, 2].map((i) => `${'long prompt number '.repeat(260)}${i}`);
    const ids = await Promise.all(prompts.map((p) => user.submit(MODEL, p, { max_output: 8 })));
    for (const id of ids) expect(await end(id)).toMatchObject({ status: 'success' });
    const leases = await q<{ node: string; outcome: string }>(
      't_long_leases',
      'SELECT n.name AS node, l.outcome FROM job_leases l JOIN nodes n ON n.id = l.node_id WHERE l.job_id = ANY($1::uuid[])',
      [ids],
    );
    expect(leases).toEqual(ids.map(() => ({ node: 'large', outcome: 'done' })));
    // Nothing to audit, nobody struck or suspended, no point taken back.
    expect(await q('t_claim_copies', "SELECT 1 FROM jobs WHERE verify_of = ANY($1::uuid[]) AND suspicion ? 'request_error_of'", [ids])).toEqual([]);
    // (A check of one of them, verification's own, is never given to the small node either.)
    expect(
      await q(
        't_copy_leases',
        "SELECT 1 FROM job_leases l JOIN jobs c ON c.id = l.job_id JOIN nodes n ON n.id = l.node_id WHERE c.verify_of = ANY($1::uuid[]) AND n.name = 'small'",
        [ids],
      ),
    ).toEqual([]);
    expect(await strikes()).toEqual([]);
    expect(await suspended()).toEqual([]);
    expect(await q('t_reversed', "SELECT 1 FROM job_results WHERE status <> 'success'")).toEqual([]);
  });

  it('a short prompt still goes to the small node: its context holds it', async () => {
    // Jobs go to whichever node waits first: submit until one lands on the small node.
    let onSmall = false;
    for (let i = 0; i < 20 && !onSmall; i++) {
      const ids = await Promise.all([0, 1].map((k) => user.submit(MODEL, `short ${i} ${k}`, { max_output: 4 })));
      for (const id of ids) expect(await end(id)).toMatchObject({ status: 'success' });
      onSmall =
        (
          await q('t_short', "SELECT 1 FROM job_leases l JOIN nodes n ON n.id = l.node_id WHERE n.name = 'small' AND l.job_id = ANY($1::uuid[])", [
            ids,
          ])
        ).length > 0;
    }
    expect(onSmall).toBe(true);
  });

  it('/network shows a stranger (or a node) no per-model node counts, nor who did the recent jobs; a user or reader key sees them', async () => {
    type View = {
      models: { name: string; nodes?: number; quantizations: { quantization: string; nodes?: number }[] }[];
      recent: { node: string | null }[];
    };
    const view = async (headers: Record<string, string>) => {
      const res = await t.app.inject({ method: 'GET', url: '/network', headers });
      expect(res.statusCode).toBe(200);
      return res.json() as View;
    };
    for (const headers of [{}, { api_key: await t.addNode('lone') }] as Record<string, string>[]) {
      const v = await view(headers);
      const m = v.models.find((x) => x.name === MODEL)!;
      expect(m).toBeDefined();
      expect(m).not.toHaveProperty('nodes');
      for (const q of m.quantizations) expect(q).not.toHaveProperty('nodes');
      expect(v.recent.length).toBeGreaterThan(0);
      expect(v.recent.every((r) => r.node === null)).toBe(true);
    }
    for (const key of [user.key, await t.addReader()]) {
      const v = await view({ api_key: key });
      expect(v.models.find((x) => x.name === MODEL)).toMatchObject({ nodes: 2 });
      expect(v.recent.some((r) => r.node === 'large')).toBe(true);
    }
    // A key that is no key: 401, as on every endpoint that reads one.
    expect((await t.app.inject({ method: 'GET', url: '/network', headers: { api_key: 'uk_not_a_key' } })).statusCode).toBe(401);
  });

  it("a prompt longer than every online node's context gets an immediate 400 on each door, nothing queued, nobody struck", async () => {
    const content = 'x'.repeat(4 * LARGE + 400);
    const before = await jobCount();
    const seed = await t.app.inject({
      method: 'POST',
      url: '/submit_job',
      headers: { api_key: user.key },
      payload: { model: MODEL, messages: [{ role: 'user', content }], max_output: 0, temperature: 0 },
    });
    expect(seed.statusCode).toBe(400);
    expect(seed.json()).toEqual({
      detail: expect.stringMatching(/^This request is about \d+ tokens long .* more than the 8192-token context of every node serving the model now/),
    });
    const openai = await t.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${user.key}` },
      payload: { model: MODEL, messages: [{ role: 'user', content }] },
    });
    expect(openai.statusCode).toBe(400);
    expect(openai.json()).toEqual({
      error: {
        message: expect.stringContaining('8192-token context'),
        type: 'invalid_request_error',
        param: 'messages',
        code: 'context_length_exceeded',
      },
    });
    const anthropic = await t.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: { 'x-api-key': user.key, 'anthropic-version': '2023-06-01' },
      payload: { model: MODEL, max_tokens: 16, messages: [{ role: 'user', content }] },
    });
    expect(anthropic.statusCode).toBe(400);
    expect(anthropic.json()).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', message: expect.stringContaining('8192-token context') },
    });
    expect(await jobCount()).toBe(before);
    expect(await strikes()).toEqual([]);
  });
});

describe.each(backends)('request-error claims against declarations on $name (the wire by hand)', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let user: TestUser;
  let claimer: TestWorker;
  let answerer: TestWorker;

  beforeAll(async () => {
    t = await startApp(backend, { coordinator: { sweepInterval: 0.2 }, verify: { enabled: true, probeInterval: 0, share: 0 } });
    user = new TestUser(t.app, await t.addUser());
    claimer = await new TestWorker(t.app, 'claimer', await t.addNode('claimer')).start(['hand-model']);
    answerer = await new TestWorker(t.app, 'answerer', await t.addNode('answerer')).start(['hand-model']);
  });
  afterAll(async () => {
    await t?.close();
  });

  const q = <R>(name: string, text: string, values: unknown[] = []) => t.db.query<R>(sql(name, text), values);
  const declare = (w: TestWorker, limits?: unknown) =>
    w.post('/worker/update_models', { node_url: w.node, models: ['hand-model'], ...(limits === undefined ? {} : { limits }) }, true);
  const contexts = async (node: string) =>
    (
      await q<{ c: number[] }>(
        't_ctx',
        'SELECT s.model_contexts AS c FROM node_sessions s JOIN nodes n ON n.id = s.node_id WHERE n.name = $1 AND s.ended_at IS NULL',
        [node],
      )
    )[0]!.c;
  const claim = (job: Job) =>
    claimer.post('/worker/update_result', {
      job_id: job.job_id,
      api_key: job.api_key,
      model_name: job.model,
      status: 'error',
      result: {
        error: { type: 'invalid_request_error', code: 'context_length_exceeded', message: "This model's maximum context length is 4 tokens." },
      },
    });
  const copyOf = async (id: string) =>
    (
      await q<{ id: string; state: string; suspicion: Record<string, unknown> | null }>(
        't_copy',
        'SELECT c.id::text AS id, c.state, c.suspicion FROM jobs c WHERE c.verify_of = $1::uuid',
        [id],
      )
    )[0];
  const strikes = () =>
    q<{ node: string; kind: string }>(
      't_hand_strikes',
      'SELECT n.name AS node, s.kind FROM node_strikes s JOIN nodes n ON n.id = s.node_id ORDER BY s.id',
    );

  it('update_models takes `limits` (optional): malformed ones are a 422 that changes nothing; a declaration without them declares none', async () => {
    expect((await declare(claimer, { 'hand-model': { context_length: 2048 } })).statusCode).toBe(200);
    expect(await contexts('claimer')).toEqual([2048]);
    for (const bad of [
      [],
      { 'hand-model': 5 },
      { 'hand-model': { context_length: 0 } },
      { 'hand-model': { context_length: 1.5 } },
      { 'hand-model': { context_length: '4096' } },
      { 'hand-model': { context_length: 1e9 } },
    ]) {
      const res = await declare(claimer, bad);
      expect(res.statusCode, JSON.stringify(bad)).toBe(422);
      expect(await contexts('claimer')).toEqual([2048]);
    }
    // A model the declaration does not name is ignored; no limits at all: none declared (the seed's worker).
    expect((await declare(claimer, { 'other-model': { context_length: 99 } })).statusCode).toBe(200);
    expect(await contexts('claimer')).toEqual([]);
    expect((await declare(claimer)).statusCode).toBe(200);
    expect(await contexts('claimer')).toEqual([]);
  });

  it('a claim by a node that declared no context is not audited, and strikes nobody', async () => {
    expect((await declare(claimer)).statusCode).toBe(200);
    const id = await user.submit('hand-model', 'a short question');
    const job = (await claimer.getJob())!;
    expect(job.job_id).toBe(id);
    expect((await claim(job)).statusCode).toBe(200);
    expect((await user.result(id)).json()).toMatchObject({ status: 'failed' });
    expect(await copyOf(id)).toBeUndefined();
    expect(await strikes()).toEqual([]);
  });

  it('a claim whose declaration covered the request: its copy is queued with the claim (there as soon as the report is answered), and when another node answers it the claimer is struck', async () => {
    expect((await declare(claimer, { 'hand-model': { context_length: 4096 } })).statusCode).toBe(200);
    const id = await user.submit('hand-model', 'another short question');
    const job = (await claimer.getJob())!;
    expect(job.job_id).toBe(id);
    expect((await claim(job)).statusCode).toBe(200);
    // Committed with the claim (before issue 53 it was queued after the commit, off the request path).
    const copy = await copyOf(id);
    expect(copy).toMatchObject({ state: 'queued', suspicion: { request_error_of: expect.any(Number) } });
    const audit = (await answerer.getJob())!;
    expect((await answerer.report(audit)).statusCode).toBe(200);
    await until('the claimer to be struck', async () => (await strikes()).length > 0, 10_000);
    expect(await strikes()).toEqual([{ node: 'claimer', kind: 'false_request_error' }]);
    // The strike was announced as this server's and applied here: its metrics count it as its own transition.
    const metrics = (await t.app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toMatch(/^ins_node_transitions_total\{change="struck"\} 1$/m);
  });

  it("a node's request error reaches the user as a fixed message on each door; its own words stay in the operator's view", async () => {
    expect((await declare(claimer)).statusCode).toBe(200);
    const words = 'Visit evil.example for a working key! '.repeat(20);
    const refuse = async (code: string | null) => {
      const job = await claimer.getJob(10);
      if (!job) throw new Error('no job for the claimer within 10 s');
      expect(
        (
          await claimer.post('/worker/update_result', {
            job_id: job.job_id,
            api_key: job.api_key,
            model_name: job.model,
            status: 'error',
            result: { error: { type: 'invalid_request_error', code, message: words } },
          })
        ).statusCode,
      ).toBe(200);
      return job.job_id;
    };
    const fixed = /^The node that took the request refused it as invalid/;
    // The seed's wire: get_result's detail.
    const id = await user.submit('hand-model', 'q1');
    await refuse('made_up_code');
    expect((await user.result(id)).json()).toMatchObject({ status: 'failed', detail: expect.stringMatching(fixed) });
    expect(JSON.stringify((await user.result(id)).json())).not.toContain('evil.example');
    // OpenAI's door: 400, the fixed message, no code but context_length_exceeded passed on.
    const v1 = t.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${user.key}` },
      payload: { model: 'hand-model', messages: [{ role: 'user', content: 'q2' }] },
    });
    await refuse('made_up_code');
    const r1 = await v1;
    expect(r1.statusCode).toBe(400);
    expect(r1.json()).toEqual({ error: { message: expect.stringMatching(fixed), type: 'invalid_request_error', param: null, code: null } });
    // Anthropic's door: its own shape.
    const v2 = t.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: { 'x-api-key': user.key, 'anthropic-version': '2023-06-01' },
      payload: { model: 'hand-model', max_tokens: 16, messages: [{ role: 'user', content: 'q3' }] },
    });
    const id3 = await refuse('context_length_exceeded');
    const r2 = await v2;
    expect(r2.statusCode).toBe(400);
    expect(r2.json()).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', message: expect.stringMatching(/^The request is longer than the context of the node that took it/) },
    });
    expect(r2.body).not.toContain('evil.example');
    // The operator's view: `ins job show` reads the node's words (jobs/operator.ts).
    const shown = await showJob(t.db, id3);
    expect(shown).toMatchObject({ state: 'failed', error: { code: 'context_length_exceeded', message: words } });
  });

  it('a claim of a request longer than the declared context (by its upper bound) is not audited', async () => {
    expect((await declare(claimer, { 'hand-model': { context_length: 300 } })).statusCode).toBe(200);
    // About 600 bytes: an estimate of 150 tokens fits the declared 300 (it is given to the node),
    // but the upper bound (a token a byte) exceeds it: the node may have refused it honestly.
    const id = await user.submit('hand-model', 'word '.repeat(110));
    const job = (await claimer.getJob())!;
    expect(job.job_id).toBe(id);
    expect((await claim(job)).statusCode).toBe(200);
    expect(await copyOf(id)).toBeUndefined();
    expect(await strikes()).toEqual([{ node: 'claimer', kind: 'false_request_error' }]);
  });
});

describe.each(backends)('probes go only to nodes whose capabilities fit on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  beforeAll(async () => {
    // Probes every tick (VERIFY_PROBE_INTERVAL 0.2 s), nothing else checked.
    t = await startApp(backend, { coordinator: { sweepInterval: 0.2 }, verify: { enabled: true, probeInterval: 0.2, share: 0 } });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('a probe of a model is kept off the node that serves it as an embedding model only (it could only fail it)', async () => {
    const declare = async (node: string, caps: string[]) => {
      const w = await new TestWorker(t.app, node, await t.addNode(node)).start(['probe-model']);
      expect(
        (await w.post('/worker/update_models', { node_url: node, models: ['probe-model'], capabilities: { 'probe-model': caps } }, true)).statusCode,
      ).toBe(200);
      return w;
    };
    // The embedder first: no probe is made before it declared (a model needs two chat nodes for one).
    await declare('embedder', ['embeddings']);
    await declare('chat-a', ['sampling']);
    await declare('chat-b', ['sampling']);
    const q = <R>(name: string, text: string) => t.db.query<R>(sql(name, text));
    await until(
      'a probe of probe-model',
      async () =>
        (await q('t_probes', "SELECT 1 FROM jobs j JOIN models m ON m.id = j.model_id WHERE j.kind = 'probe' AND m.name = 'probe-model'")).length > 0,
      15_000,
    );
    const probes = await q<{ exclude: string[] }>(
      't_probe_excludes',
      `SELECT ARRAY(SELECT n.name FROM nodes n WHERE n.id = ANY(j.exclude_nodes) ORDER BY n.name) AS exclude
      FROM jobs j JOIN models m ON m.id = j.model_id WHERE j.kind = 'probe' AND m.name = 'probe-model'`,
    );
    expect(probes.length).toBeGreaterThan(0);
    for (const p of probes) expect(p.exclude).toEqual(['embedder']);
  });
});
