// Fair shares (issue 23): daily quotas per user key, counted in the statement that accepts the
// job (exact under concurrent submitters, on one server and on two), refused with 429 and
// Retry-After (OpenAI's insufficient_quota on /v1), shown by GET /usage from the same counter;
// fair queueing between owners, weighted by priority, without starving anyone; positions in
// the 404 body that follow the fair order. Over the real app, on every backend.
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { NO_RATE_LIMITS } from '../src/config.js';
import { addApiKey, setKeyPriority, setKeyQuota } from '../src/nodes/api-keys.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { secondsToUtcMidnight } from '../src/jobs/submit.js';
import { ensureModelIdFor } from '../src/repositories/models.js';
import { runCommand } from '../src/cli/commands.js';
import { bufferIo } from '../src/cli/io.js';
import { backends, TEST_DATABASE_URL } from './helpers/db.js';
import { startApp, type TestApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { twoServers } from './helpers/two-servers.js';

const submitRaw = (app: TestApp, key: string, model: string, extra: Record<string, unknown> = {}) =>
  app.inject({
    method: 'POST',
    url: '/submit_job',
    headers: { api_key: key },
    payload: { model, messages: [{ role: 'user', content: 'hi' }], ...extra },
  });

const usageOf = async (app: TestApp, key: string) => {
  const res = await app.inject({ method: 'GET', url: '/usage', headers: { api_key: key } });
  expect(res.statusCode).toBe(200);
  return res.json<{
    day: string;
    reset_seconds: number;
    used: { jobs: number; tokens: number };
    quota: { jobs: number | null; tokens: number | null };
    priority: number;
    models: { model: string; jobs: number; tokens: number }[];
  }>();
};

/** The 429 of a quota: Retry-After is the seconds to the next 00:00 UTC. */
function expectQuota429(res: { statusCode: number; headers: Record<string, unknown> }): void {
  expect(res.statusCode).toBe(429);
  expect(Math.abs(Number(res.headers['retry-after']) - secondsToUtcMidnight())).toBeLessThanOrEqual(2);
}

describe.each(backends)('fair shares on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let url: string;
  let nodes = 0;
  const user = async (label: string, quota?: { jobs?: number; tokens?: number }, priority?: number) => {
    const k = await addApiKey(t.db, 'user', label);
    if (quota) await setKeyQuota(t.db, String(k.id), quota.jobs, quota.tokens);
    if (priority) await setKeyPriority(t.db, String(k.id), priority);
    return { ...k, user: new TestUser(t.app, k.key) };
  };
  const worker = async (models: string[]) => {
    const name = `fair-node-${++nodes}`;
    return new TestWorker(t.app, name, await t.addNode(name)).start(models);
  };

  beforeAll(async () => {
    t = await startApp(backend, { coordinator: { sweepInterval: 0.2 } });
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    await t.close();
  });

  it('accepts exactly the quota of jobs from 64 concurrent submissions; the next is 429 until midnight UTC; /usage shows what was enforced', async () => {
    const { key, id } = await user('quota-jobs', { jobs: 10 });
    const answers = await Promise.all(Array.from({ length: 64 }, () => submitRaw(t.app, key, 'quota-model')));
    expect(answers.filter((r) => r.statusCode === 200)).toHaveLength(10);
    for (const r of answers.filter((a) => a.statusCode !== 200)) {
      expectQuota429(r);
      expect(r.json()).toEqual({ detail: expect.stringMatching(/^Quota exceeded: .*jobs/) });
    }
    expectQuota429(await submitRaw(t.app, key, 'quota-model'));
    const [n] = await t.db.query<{ n: number }>(sql('t_count', 'SELECT count(*)::int AS n FROM jobs WHERE owner_key_id = $1::bigint'), [id]);
    expect(n!.n).toBe(10);
    const u = await usageOf(t.app, key);
    expect(u).toMatchObject({ used: { jobs: 10 }, quota: { jobs: 10, tokens: null }, priority: 1, models: [{ model: 'quota-model', jobs: 10 }] });
    expect(u.reset_seconds).toBeGreaterThan(0);
    expect(u.day).toBe(new Date().toISOString().slice(0, 10));
    // Raised: more fit at once.
    await setKeyQuota(t.db, 'quota-jobs', 12, undefined);
    expect((await submitRaw(t.app, key, 'quota-model')).statusCode).toBe(200);
  });

  it('reserves max_output tokens at submission, settles them to the reported count, gives them back on cancel', async () => {
    const { key } = await user('quota-tokens', { tokens: 1000 });
    const answers = await Promise.all(Array.from({ length: 64 }, () => submitRaw(t.app, key, 'tokens-model', { max_output: 100 })));
    const accepted = answers.filter((r) => r.statusCode === 200).map((r) => r.json<{ job_id: string }>().job_id);
    expect(accepted).toHaveLength(10);
    for (const r of answers.filter((a) => a.statusCode !== 200)) expectQuota429(r);
    expect((await usageOf(t.app, key)).used).toEqual({ jobs: 10, tokens: 1000 });
    // A node reports 30 output tokens: 70 come back.
    const w = await worker(['tokens-model']);
    const job = (await w.getJob())!;
    const report = await w.post('/worker/update_result', {
      job_id: job.job_id,
      api_key: job.api_key,
      model_name: job.model,
      status: 'success',
      result: { message: { role: 'assistant', content: 'thirty tokens or so of an answer' } },
      usage: { prompt_tokens: 5, completion_tokens: 30 },
    });
    expect(report.statusCode).toBe(200);
    // The settler folds it in (src/usage/settle.ts); until then the reservation still counts.
    expect((await usageOf(t.app, key)).used).toEqual({ jobs: 10, tokens: 1000 });
    const over = await submitRaw(t.app, key, 'tokens-model', { max_output: 70 });
    expectQuota429(over);
    expect(over.json().detail).toMatch(/^Quota exceeded: .*has less left than the 70 this job reserves/);
    await t.app.service.usage.settle();
    expect((await usageOf(t.app, key)).used).toEqual({ jobs: 10, tokens: 930 });
    // Settled once: another look changes nothing.
    expect(await t.app.service.usage.settle()).toEqual({ jobs: 0, busy: false });
    expect((await usageOf(t.app, key)).used).toEqual({ jobs: 10, tokens: 930 });
    expectQuota429(await submitRaw(t.app, key, 'tokens-model', { max_output: 100 }));
    expect((await submitRaw(t.app, key, 'tokens-model', { max_output: 70 })).statusCode).toBe(200);
    // A canceled job gives its reservation back (it still counts as a job).
    const open = accepted.find((j) => j !== job.job_id)!;
    expect((await t.app.inject({ method: 'POST', url: `/cancel_job/${open}`, headers: { api_key: key } })).statusCode).toBe(200);
    expect(await t.app.service.usage.settle()).toEqual({ jobs: 1, busy: false });
    const after = await usageOf(t.app, key);
    expect(after.used).toEqual({ jobs: 11, tokens: 900 });
    expect(after.models).toEqual([{ model: 'tokens-model', jobs: 11, tokens: 900 }]);
  });

  it("charges a job whose node counts no tokens (as the seed's workers) an estimate from the answer, not its whole reservation; /v1 shows it, get_result keeps the seed's body", async () => {
    const { key } = await user('uncounted', { tokens: 1000 });
    const w = await worker(['uncounted-model']);
    const submitted = (await Promise.all([0, 1, 2].map(() => submitRaw(t.app, key, 'uncounted-model', { max_output: 100 })))).map(
      (r) => r.json<{ job_id: string }>().job_id,
    );
    expect((await usageOf(t.app, key)).used).toEqual({ jobs: 3, tokens: 300 });
    const report = (job: Job, content: string) =>
      w.post('/worker/update_result', {
        job_id: job.job_id,
        api_key: job.api_key,
        model_name: job.model,
        status: 'success',
        result: { message: { role: 'assistant', content } },
      });
    // 41 bytes: 11 tokens; 'é' twice is 4 bytes: 1 token; 1,000 bytes: 250, clamped at the job's max_output as a count would be.
    for (const content of ['The answer is forty-two, as it always was.', 'éé', 'x'.repeat(1000)]) {
      const job = (await w.getJob())!;
      expect((await report(job, content)).statusCode).toBe(200);
    }
    await t.app.service.usage.settle();
    expect((await usageOf(t.app, key)).used).toEqual({ jobs: 3, tokens: 11 + 1 + 100 });
    // The seed's get_result stays the seed's: no usage field for an estimate.
    const done = await t.app.inject({ method: 'GET', url: `/get_result/${submitted[0]}`, headers: { api_key: key } });
    expect(Object.keys(done.json()).sort()).toEqual(['job_id', 'result', 'status']);
    // /v1 answers the estimate: the prompt's text ("Say it", 6 bytes: 2) and the answer's (11).
    const reply = t.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}` },
      payload: { model: 'uncounted-model', messages: [{ role: 'user', content: 'Say it' }], max_tokens: 50 },
    });
    const job = (await w.getJob(5))!;
    // 400 bytes: 100 tokens by the estimate, clamped at max_tokens (50), which a count would read as
    // the node stopping at the limit; an estimate says nothing of it.
    expect((await report(job, 'y'.repeat(400))).statusCode).toBe(200);
    const body = (await reply).json<{ usage: unknown; choices: { finish_reason: string }[] }>();
    expect(body.usage).toEqual({ prompt_tokens: 2, completion_tokens: 50, total_tokens: 52 });
    expect(body.choices[0]!.finish_reason).toBe('stop');
  });

  it('refuses a job only when it does not fit: one too large for what is left holds back none of the smaller ones of its batch', async () => {
    const { key, id } = await user('quota-mixed', { tokens: 1000 });
    expect((await submitRaw(t.app, key, 'mixed-model', { max_output: 500 })).statusCode).toBe(200);
    // One statement, as the batcher makes it: 600 does not fit in the 500 left; before, every job
    // behind it in the batch was refused with it (a prefix of the owner's jobs fit).
    const modelId = (await ensureModelIdFor(t.db, 'mixed-model', { key: id }, 100))!;
    const row = (reserve: number) => ({
      id: randomUUID(),
      ownerKeyId: id,
      modelId,
      request: { messages: [{ role: 'user', content: 'hi' }], max_output: reserve, temperature: 0 },
      timeout: 60,
      reserve,
    });
    const rows = [row(600), row(1), row(1), row(2000), row(1)];
    const { refused } = await t.app.service.coordinator.lifecycle.submit(rows);
    expect(Object.fromEntries(refused)).toEqual({
      [rows[0]!.id]: 'tokens',
      [rows[1]!.id]: 'retry',
      [rows[2]!.id]: 'retry',
      [rows[3]!.id]: 'reserve',
      [rows[4]!.id]: 'retry',
    });
    // Over HTTP, concurrently: the small ones are taken (submitted again behind the large one), the large one is 429.
    const [large, ...small] = await Promise.all([
      submitRaw(t.app, key, 'mixed-model', { max_output: 600 }),
      ...Array.from({ length: 40 }, () => submitRaw(t.app, key, 'mixed-model', { max_output: 1 })),
    ]);
    expectQuota429(large!);
    expect(small.map((r) => r.statusCode)).toEqual(small.map(() => 200));
    expect((await usageOf(t.app, key)).used).toEqual({ jobs: 41, tokens: 540 });
  });

  it("answers a job larger than its key's whole token quota with 400 (no day would take it), not a 429 to retry at midnight", async () => {
    await worker(['whole-quota-model']);
    const { key } = await user('quota-whole', { tokens: 1000 });
    const res = await submitRaw(t.app, key, 'whole-quota-model', { max_output: 1001 });
    expect(res.statusCode).toBe(400);
    expect(res.headers['retry-after']).toBeUndefined();
    expect(res.json()).toEqual({
      detail: expect.stringMatching(/^Over the quota: this job reserves 1001 output tokens .*more than the key's whole daily quota/),
    });
    // No max_tokens: the reservation is QUOTA_RESERVE_TOKENS (1024), over this key's 1000.
    const v1 = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'whole-quota-model', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(v1.status).toBe(400);
    // param names what to lower: max_tokens, or max_completion_tokens where the request set it (an outside probe read null).
    expect(await v1.json()).toEqual({
      error: {
        message: expect.stringContaining('QUOTA_RESERVE_TOKENS'),
        type: 'invalid_request_error',
        param: 'max_tokens',
        code: 'max_tokens_over_quota',
      },
    });
    const v1Completion = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'whole-quota-model', messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: 1001 }),
    });
    expect(v1Completion.status).toBe(400);
    expect(await v1Completion.json()).toMatchObject({ error: { param: 'max_completion_tokens', code: 'max_tokens_over_quota' } });
    expect((await usageOf(t.app, key)).used).toEqual({ jobs: 0, tokens: 0 });
    expect((await submitRaw(t.app, key, 'whole-quota-model', { max_output: 1000 })).statusCode).toBe(200);
  });

  it("answers a used-up quota on /v1 in OpenAI's shape: 429 insufficient_quota with Retry-After", async () => {
    await worker(['oai-quota-model']);
    const { key } = await user('quota-openai', { jobs: 0 });
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'oai-quota-model', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(429);
    expect(Math.abs(Number(res.headers.get('retry-after')) - secondsToUtcMidnight())).toBeLessThanOrEqual(2);
    expect(await res.json()).toEqual({
      error: { message: expect.stringContaining('quota'), type: 'insufficient_quota', param: null, code: 'insufficient_quota' },
    });
    // Not to be retried: the SDK, with its default retries, would otherwise sleep the hours of Retry-After, twice.
    expect(res.headers.get('x-should-retry')).toBe('false');
    const sdk = new OpenAI({ baseURL: `${url}/v1`, apiKey: key });
    const err = await sdk.chat.completions.create({ model: 'oai-quota-model', messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect((err as InstanceType<typeof OpenAI.RateLimitError>).code).toBe('insufficient_quota');
  });

  it("serves owners in turn: a light user's job goes ahead of a heavy backlog, and its 404 says so", async () => {
    const heavy = await user('heavy');
    const light = await user('light');
    const heavyJobs: string[] = [];
    for (let i = 0; i < 8; i++) heavyJobs.push(await heavy.user.submit('fair-model', `h${i}`));
    const lightJob = await light.user.submit('fair-model', 'l0');
    // Where the jobs stand, read by a poll (the position comes within a second).
    await expect.poll(async () => (await light.user.result(lightJob)).json<{ position: number | null }>().position, { timeout: 5000 }).not.toBeNull();
    const lightPos = (await light.user.result(lightJob)).json<{ state: string; position: number }>();
    expect(lightPos.state).toBe('queued');
    expect(lightPos.position).toBeLessThanOrEqual(1); // FIFO would say 8
    await expect.poll(async () => (await heavy.user.result(heavyJobs[7]!)).json<{ position: number | null }>().position, { timeout: 5000 }).toBe(8);
    const w = await worker(['fair-model']);
    const order: string[] = [];
    for (let job = await w.getJob(); job; job = await w.getJob()) {
      order.push(job.job_id);
      expect((await w.report(job)).statusCode).toBe(200);
    }
    expect(order.indexOf(lightJob)).toBeLessThanOrEqual(1);
    expect(order.filter((j) => j !== lightJob)).toEqual(heavyJobs); // oldest first within an owner
  });

  it("tells where a job stands in fair order: the 404 body's position and eta, and a streaming client's SSE comments", async () => {
    const heavy = await user('eta-heavy');
    const light = await user('eta-light');
    const w = await worker(['eta-model']);
    // One job done: the model has a pace, so the wait can be estimated.
    await heavy.user.submit('eta-model', 'pace');
    const paced = (await w.getJob())!;
    await w.report(paced);
    const backlog: string[] = [];
    for (let i = 0; i < 6; i++) backlog.push(await heavy.user.submit('eta-model', `h${i}`));
    const lightJob = await light.user.submit('eta-model', 'l0');
    await expect
      .poll(async () => (await light.user.result(lightJob)).json<{ eta_seconds: number | null }>().eta_seconds, { timeout: 5000 })
      .not.toBeNull();
    const lightBody = (await light.user.result(lightJob)).json<{ detail: string; state: string; position: number; eta_seconds: number }>();
    expect(lightBody).toMatchObject({ detail: 'Job not finished', state: 'queued' });
    expect(lightBody.position).toBeLessThanOrEqual(1);
    await expect.poll(async () => (await heavy.user.result(backlog[5]!)).json<{ position: number | null }>().position, { timeout: 5000 }).toBe(6);
    const heavyBody = (await heavy.user.result(backlog[5]!)).json<{ eta_seconds: number }>();
    expect(heavyBody.eta_seconds).toBeGreaterThanOrEqual(lightBody.eta_seconds);
    // A streaming completion of a third owner: its comments say it is near the head, not behind the backlog.
    const third = await user('eta-stream');
    const gone = new AbortController();
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      signal: gone.signal,
      headers: { authorization: `Bearer ${third.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'eta-model', stream: true, messages: [{ role: 'user', content: 'streamed' }] }),
    });
    const reader = res.body!.getReader();
    let text = '';
    let position: number | undefined;
    while (position === undefined) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
      const m = /: queue \{"state":"queued","position":(\d+),"eta_seconds":\d+\}/.exec(text);
      if (m) position = Number(m[1]);
    }
    gone.abort();
    expect(position).toBeLessThanOrEqual(2); // FIFO would say 7
  });

  it('weights owners by priority: with 2 against 1, twice the share while both wait', async () => {
    const a = await user('prio-a', undefined, 2);
    const b = await user('prio-b');
    const aJobs = new Set<string>();
    for (let i = 0; i < 6; i++) aJobs.add(await a.user.submit('prio-model', `a${i}`));
    for (let i = 0; i < 6; i++) await b.user.submit('prio-model', `b${i}`);
    const w = await worker(['prio-model']);
    const first: string[] = [];
    for (let i = 0; i < 6; i++) {
      const job = (await w.getJob())!;
      first.push(job.job_id);
      await w.report(job);
    }
    expect(first.filter((j) => aJobs.has(j))).toHaveLength(4);
    expect((await usageOf(t.app, a.key)).priority).toBe(2);
  });

  it('starves nobody: a backlog still gets through while a light user of high priority keeps submitting', async () => {
    const slow = await user('aging-slow');
    const fast = await user('aging-fast', undefined, 10);
    const backlog = new Set<string>();
    for (let i = 0; i < 4; i++) backlog.add(await slow.user.submit('aging-model', `s${i}`));
    const w = await worker(['aging-model']);
    let rounds = 0;
    while (backlog.size > 0) {
      // Priority 10 against 1: at most ten or so of the fast user's turns per job of the backlog
      // (11, with a tie at the head; steps of 0.1 add up to a hair under 1 in floating point: 12).
      expect(++rounds).toBeLessThanOrEqual(4 * 12 + 2);
      await fast.user.submit('aging-model', `f${rounds}`);
      const job = (await w.getJob())!;
      backlog.delete(job.job_id);
      await w.report(job);
    }
    // And the fast user got most of the turns meanwhile (its priority), not all of them.
    expect(rounds).toBeGreaterThan(8);
  });

  it("a backlog that left the queue unserved (canceled) does not push its owner's next job behind everyone else's", async () => {
    const heavy = await user('lane-heavy');
    const light = await user('lane-light');
    const backlog = await Promise.all(Array.from({ length: 30 }, (_, i) => heavy.user.submit('lane-model', `h${i}`)));
    for (const id of backlog)
      expect((await t.app.inject({ method: 'POST', url: `/cancel_job/${id}`, headers: { api_key: heavy.key } })).statusCode).toBe(200);
    const lights: string[] = [];
    for (let i = 0; i < 6; i++) lights.push(await light.user.submit('lane-model', `l${i}`));
    const next = await heavy.user.submit('lane-model', 'h-after');
    const w = await worker(['lane-model']);
    const order: string[] = [];
    for (let i = 0; i < 7; i++) {
      const job = (await w.getJob())!;
      order.push(job.job_id);
      await w.report(job);
    }
    expect(new Set(order)).toEqual(new Set([...lights, next]));
    // It goes one step past the head of the queue (beside the light user's second job), not after 30 jobs' worth of turns.
    expect(order.indexOf(next)).toBeLessThanOrEqual(2);
  });

  it('sets quotas and priorities with ins key set-quota / set-priority; ins key usage shows the enforced counter', async () => {
    const { key } = await user('cli-app');
    const ins = async (...argv: string[]) => {
      const io = bufferIo();
      return { code: await runCommand(t.db, argv, io), io };
    };
    expect((await ins('key', 'set-quota', 'cli-app', '--jobs', '2', '--tokens', '5000')).code).toBe(0);
    expect((await ins('key', 'set-priority', 'cli-app', '3')).code).toBe(0);
    const answers = await Promise.all(Array.from({ length: 3 }, () => submitRaw(t.app, key, 'cli-model', { max_output: 10 })));
    expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 200, 429]);
    const shown = await ins('key', 'usage', 'cli-app', '--json');
    expect(JSON.parse(shown.io.stdout[0]!)).toMatchObject({
      used: { jobs: 2, tokens: 20 },
      quota: { jobs: 2, tokens: 5000 },
      priority: 3,
      models: [{ model: 'cli-model', jobs: 2, tokens: 20 }],
    });
    expect((await ins('key', 'usage', 'cli-app')).io.stdout[0]).toMatch(/jobs 2 of 2, output tokens 20 of 5000; priority 3/);
    // Back to the configured default (none here): no limit. --json shows the key's quotas as they
    // now are, the one left unchanged too (null: the configured default applies).
    const reset = await ins('key', 'set-quota', 'cli-app', '--jobs', 'default', '--json');
    expect(reset.code).toBe(0);
    expect(JSON.parse(reset.io.stdout[0]!)).toEqual({ id: expect.any(Number), jobs: null, tokens: 5000 });
    expect(await usageOf(t.app, key)).toMatchObject({ quota: { jobs: null, tokens: 5000 } });
    expect((await submitRaw(t.app, key, 'cli-model', { max_output: 10 })).statusCode).toBe(200);
    // Wrong arguments change nothing (exit 2).
    expect((await ins('key', 'set-quota', 'cli-app')).code).toBe(2);
    expect((await ins('key', 'set-quota', 'cli-app', '--jobs', '-1')).code).toBe(2);
    expect((await ins('key', 'set-priority', 'cli-app', '0')).code).toBe(2);
    expect((await ins('key', 'set-priority', 'nobody', '2')).code).toBe(1);
    // Another kind of key has no usage to show.
    await t.addReader('not-a-user');
    expect((await ins('key', 'usage', 'not-a-user')).io.stderr[0]).toBe('ins: no user key "not-a-user"');
    // With --json, a failure is JSON on stdout too.
    const failed = await ins('key', 'set-quota', 'nobody', '--jobs', '1', '--json');
    expect(failed.code).toBe(1);
    expect(JSON.parse(failed.io.stdout[0]!)).toEqual({ error: 'no user key "nobody"' });
    expect(failed.io.stderr[0]).toMatch(/^ins: /);
  });

  it('keeps kirabot-style polling as it was: submit_job, then get_result until it stops answering 404', async () => {
    const { user: u } = await user('kirabot');
    const jobId = await u.submit('kira-model', 'poll me');
    const first = await u.result(jobId);
    expect(first.statusCode).toBe(404);
    expect(first.json()).toMatchObject({ detail: 'Job not finished', state: 'queued' });
    const w = await worker(['kira-model']);
    const job = (await w.getJob())! as Job;
    expect(job.job_id).toBe(jobId);
    await w.report(job, 'done for kira');
    let res = await u.result(jobId);
    while (res.statusCode === 404) res = await u.result(jobId);
    expect(res.json()).toMatchObject({ status: 'success', result: { message: { content: 'done for kira' } } });
  });

  it("shows each model's queue and throughput on GET /network", async () => {
    const res = (await t.app.inject({ method: 'GET', url: '/network' })).json<{
      models: { name: string; queued: number; jobs_per_minute: number }[];
    }>();
    expect(res.models.find((m) => m.name === 'fair-model')).toMatchObject({ queued: 0, jobs_per_minute: 9 });
    expect(res.models.find((m) => m.name === 'quota-model')).toMatchObject({ queued: 11, jobs_per_minute: 0 });
  });
});

describe.runIf(TEST_DATABASE_URL)('quotas across two servers on one PostgreSQL database', () => {
  const { dbs, apps } = twoServers({ pool: 8, app: { verify: { enabled: false }, rateLimits: NO_RATE_LIMITS } });

  for (const [what, quota, extra] of [
    ['jobs', { jobs: 17 }, {}],
    ['tokens', { tokens: 17 * 64 }, { max_output: 64 }],
  ] as const) {
    it(`accepts exactly the quota of ${what} from 64 concurrent submitters, half on each server; the next is 429 on either`, async () => {
      const k = await addApiKey(dbs[0]!, 'user', `two-${what}`);
      await setKeyQuota(dbs[0]!, String(k.id), 'jobs' in quota ? quota.jobs : undefined, 'tokens' in quota ? quota.tokens : undefined);
      // Each submitter sends a few jobs in a row: the batches mix keys' jobs on both servers.
      const answers = (
        await Promise.all(
          Array.from({ length: 64 }, async (_, i) => {
            const out = [];
            for (let j = 0; j < 2; j++) out.push(await submitRaw(apps[i % 2]!, k.key, `two-${what}-model`, extra));
            return out;
          }),
        )
      ).flat();
      expect(answers.filter((r) => r.statusCode === 200)).toHaveLength(17);
      for (const r of answers.filter((a) => a.statusCode !== 200)) expectQuota429(r);
      for (const app of apps) expectQuota429(await submitRaw(app, k.key, `two-${what}-model`, extra));
      const u = await usageOf(apps[1]!, k.key);
      expect(u.used).toEqual({ jobs: 17, tokens: 'tokens' in quota ? 17 * 64 : 17 * 1024 });
      const [n] = await dbs[1]!.query<{ n: number }>(sql('t_count2', 'SELECT count(*)::int AS n FROM jobs WHERE owner_key_id = $1::bigint'), [k.id]);
      expect(n!.n).toBe(17);
    });
  }

  it('settles each finished job once while both servers settle at the same time: the used tokens are exactly what the nodes reported', async () => {
    const k = await addApiKey(dbs[0]!, 'user', 'two-settle');
    await setKeyQuota(dbs[0]!, String(k.id), undefined, 24 * 100);
    const user = new TestUser(apps[0]!, k.key);
    const ids: string[] = [];
    for (let i = 0; i < 24; i++) ids.push(await user.submit('two-settle-model', 'Hello', { max_output: 100 }));
    // Half the jobs reported from each server (i output tokens for the i-th), one failed, one canceled.
    const workers = await Promise.all(
      [0, 1].map(async (i) =>
        new TestWorker(apps[i]!, `settle-node-${i}`, (await createNode(dbs[i]!, `settle-node-${i}`)).key).start(['two-settle-model']),
      ),
    );
    let reported = 0;
    for (let i = 0; i < 22; i++) {
      const w = workers[i % 2]!;
      const job = (await w.getJob())!;
      const status = i === 0 ? 'error' : 'success';
      const res = await w.post('/worker/update_result', {
        job_id: job.job_id,
        api_key: job.api_key,
        model_name: job.model,
        status,
        result: { message: { role: 'assistant', content: 'x'.repeat(i) } },
        usage: { prompt_tokens: 1, completion_tokens: i },
      });
      expect(res.statusCode).toBe(200);
      if (status === 'success') reported += i;
    }
    const queued = (
      await dbs[0]!.query<{ id: string }>(
        sql('t_queued', "SELECT id::text FROM jobs WHERE owner_key_id = $1::bigint AND state = 'queued' ORDER BY id"),
        [k.id],
      )
    ).map((r) => r.id);
    expect((await apps[1]!.inject({ method: 'POST', url: `/cancel_job/${queued[0]}`, headers: { api_key: k.key } })).statusCode).toBe(200);
    // Both servers settle at once, over and over, until nothing is owed: each job is folded once.
    const owed = async () =>
      (await dbs[0]!.query<{ n: number }>(sql('t_owed', 'SELECT count(*)::int AS n FROM usage_owed WHERE key_id = $1::bigint'), [k.id]))[0]!.n;
    let settled = 0;
    for (let round = 0; round < 50 && (await owed()) > 0; round++) {
      for (const r of await Promise.all(apps.map((a) => a.service.usage.settle()))) settled += r!.jobs;
    }
    expect(await owed()).toBe(0);
    // Every finished job (done or canceled; the error report requeued its job) was settled once.
    const [finished] = await dbs[0]!.query<{ n: number }>(
      sql('t_finished', 'SELECT count(*)::int AS n FROM jobs WHERE owner_key_id = $1::bigint AND finished_at IS NOT NULL'),
      [k.id],
    );
    expect(settled).toBe(finished!.n);
    // Open jobs keep their reservation (100 each); finished ones cost what was reported.
    const [open] = await dbs[0]!.query<{ n: number }>(
      sql('t_open', "SELECT count(*)::int AS n FROM jobs WHERE owner_key_id = $1::bigint AND state IN ('queued', 'leased')"),
      [k.id],
    );
    const u = await usageOf(apps[1]!, k.key);
    expect(u.used).toEqual({ jobs: 24, tokens: reported + open!.n * 100 });
    expect(u.models).toEqual([{ model: 'two-settle-model', jobs: 24, tokens: reported + open!.n * 100 }]);
  });

  it("orders a model's queue fairly whichever server took the jobs", async () => {
    const heavy = new TestUser(apps[0]!, (await addApiKey(dbs[0]!, 'user', 'two-heavy')).key);
    const light = new TestUser(apps[1]!, (await addApiKey(dbs[0]!, 'user', 'two-light')).key);
    for (let i = 0; i < 5; i++) await heavy.submit('two-fair-model');
    const lightJob = await light.submit('two-fair-model');
    const w = await new TestWorker(apps[1]!, 'two-node', (await createNode(dbs[1]!, 'two-node')).key).start(['two-fair-model']);
    const first: string[] = [];
    for (let i = 0; i < 2; i++) {
      const job = (await w.getJob())!;
      first.push(job.job_id);
      await w.report(job);
    }
    expect(first).toContain(lightJob);
  });
});
