// Checked delivery (issue 55 part 1; docs/verification.md, "Checked delivery") through the real
// app on both backends, with nodes speaking the wire (inject) whose "models" answer in the ways
// test/helpers/behaviours.ts describes: honest nodes (the same prose for a prompt), a lazy node
// (one canned text for everything) and a liar (the prose of another prompt). No node here can
// score, so every held answer is checked by copies: it is delivered once another node's answer
// agrees with it, and one that nobody's agrees with is replaced by an answer two nodes agree on.
// - a key set to checked (`ins key set-delivery`): CHECKED_JOBS jobs (40; 200 in the issue),
//   0 wrong answers delivered, each bad answer replaced by a checked one, get_result says
//   `delivery: "checked"`, /usage shows the checks' cost;
// - the same per request, with `x-ins-delivery: checked` on /v1/chat/completions (the header
//   on the answer) and on /submit_job;
// - a stream under checked delivery never shows text that failed its check: the lazy node's
//   partial output is never relayed, the stream carries the checked answer whole;
// - a bad header value: 400 naming it on every door, nothing queued;
// - no node to check: the answer is withheld (503 answer_unchecked; get_result `failed`,
//   `delivery: "unchecked"`), never delivered unchecked.
import { afterEach, describe, expect, it } from 'vitest';
import { runCommand } from '../src/cli/commands.js';
import { bufferIo } from '../src/cli/io.js';
import type { VerifyConfig } from '../src/config-verify.js';
import { backends } from './helpers/db.js';
import { auditWaits } from './helpers/audits.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { prose } from './helpers/behaviours.js';
import { responseId } from '../src/routes/openai/responses.js';

const MODEL = 'checked-model';
const JOBS = Number(process.env.CHECKED_JOBS ?? 40);
// No sampling of the network's own (share 0): every check here is checked delivery's.
const VERIFY: Partial<VerifyConfig> = { enabled: true, share: 0, probeInterval: 0, maxTokensPerSecond: 0, minWordsForReplay: 1_000_000 };
const CANNED = 'I am happy to help with that. Here is a short answer that fits any question you might ask.';

const promptOf = (job: Job) => job.messages.at(-1)?.content ?? '';
/** What each node answers: honest nodes the prompt's prose, the lazy node its canned text, the liar another prompt's prose. */
const answerOf = (node: string, job: Job) =>
  node === 'lazy' ? CANNED : node === 'liar' ? prose(job.model, `${promptOf(job)} (not this one)`) : prose(job.model, promptOf(job));
const NODES = ['honest-1', 'honest-2', 'honest-3', 'lazy', 'liar'];

describe.each(backends)('checked delivery on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  const start = async (nodes: string[]) => {
    t = await startApp(backend, { verify: VERIFY });
    const key = await t.addUser('app');
    const workers: TestWorker[] = [];
    for (const n of nodes) workers.push(await new TestWorker(t.app, n, await t.addNode(n)).start([MODEL]));
    return { user: new TestUser(t.app, key), key, workers };
  };
  const { q, until } = auditWaits(() => t.db, { timeoutMs: 60_000 });
  /** Which node answered each job first (the jobs' own answers, before any check). */
  const answeredBy = async () =>
    new Map(
      (
        await q<{ id: string; name: string }>(
          't_by',
          `SELECT j.id::text, n.name FROM jobs j JOIN nodes n ON n.id = j.node_id WHERE j.kind = 'user' AND j.state = 'done'`,
        )
      ).map((r) => [r.id, r.name]),
    );
  /** Every worker polls once and answers, until `done`; `progress` first sends the answer as partial output. */
  const serve = async (workers: TestWorker[], done: () => Promise<boolean>, progress = false) =>
    until('the answers to be delivered', async () => {
      for (const w of workers) {
        const job = await w.getJob();
        if (!job) continue;
        if (progress) await w.post('/worker/job_progress', { job_id: job.job_id, api_key: job.api_key, delta: answerOf(w.node, job) });
        expect((await w.report(job, answerOf(w.node, job))).statusCode).toBe(200);
      }
      return done();
    });
  const results = async (user: TestUser, ids: string[]) => Promise.all(ids.map(async (id) => ({ id, res: await user.result(id) })));
  const allDelivered = (user: TestUser, ids: string[]) => async () => (await results(user, ids)).every((r) => r.res.statusCode === 200);

  it(`a key set to checked gets no wrong answer in ${JOBS} jobs: each bad one is replaced by a checked one`, { timeout: 240_000 }, async () => {
    const { user, workers } = await start(NODES);
    const io = bufferIo();
    expect(await runCommand(t.db, ['key', 'set-delivery', 'app', 'checked'], io)).toBe(0);
    const listed = bufferIo();
    await runCommand(t.db, ['key', 'list'], listed);
    expect(listed.stdout.join('\n')).toMatch(/app\s+active\s+checked/);
    const ids: string[] = [];
    for (let i = 0; i < JOBS; i++) ids.push(await user.submit(MODEL, `question ${i}`));
    // Held while unchecked: nothing is given before the check (the first poll, nobody has answered yet).
    expect((await user.result(ids[0]!)).statusCode).toBe(404);
    await serve(workers, allDelivered(user, ids));
    const by = await answeredBy();
    let replaced = 0;
    for (const [i, { id, res }] of (await results(user, ids)).entries()) {
      const body = res.json() as { status: string; delivery?: string; result: { message: { content: string } } };
      expect(body.status).toBe('success');
      expect(body.delivery).toBe('checked');
      // 0 wrong answers delivered: each is the honest prose of its own prompt.
      expect(body.result.message.content).toBe(prose(MODEL, `question ${i}`));
      if (['lazy', 'liar'].includes(by.get(id)!)) replaced++;
    }
    // The bad nodes answered some of the jobs first, and each of those answers was replaced.
    expect(replaced).toBeGreaterThan(0);
    const usage = (await t.app.inject({ method: 'GET', url: '/usage', headers: { api_key: user.key } })).json() as {
      delivery: string;
      checking: { jobs: number; checks: number; tokens: number; points: number };
    };
    expect(usage.delivery).toBe('checked');
    expect(usage.checking.jobs).toBe(JOBS);
    expect(usage.checking.checks).toBeGreaterThanOrEqual(JOBS);
    expect(usage.checking.points).toBeGreaterThan(0);
    // The bad nodes got their strikes as checks always gave them; no honest node was struck.
    const struck = await q<{ name: string }>('t_struck', 'SELECT DISTINCT n.name FROM node_strikes k JOIN nodes n ON n.id = k.node_id');
    expect(struck.map((s) => s.name).filter((n) => n.startsWith('honest'))).toEqual([]);
    expect(struck.length).toBeGreaterThan(0);
  });

  it('checks a request that asks with x-ins-delivery: checked, on /v1/chat/completions and /submit_job, and says so', {
    timeout: 120_000,
  }, async () => {
    const { user, key, workers } = await start(NODES);
    const n = Math.max(10, Math.floor(JOBS / 4));
    const chats = Array.from({ length: n }, (_, i) =>
      t.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { authorization: `Bearer ${key}`, 'x-ins-delivery': 'checked' },
        payload: { model: MODEL, messages: [{ role: 'user', content: `chat ${i}` }], temperature: 0 },
      }),
    );
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const res = await t.app.inject({
        method: 'POST',
        url: '/submit_job',
        headers: { api_key: key, 'x-ins-delivery': 'checked' },
        payload: { model: MODEL, messages: [{ role: 'user', content: `seed ${i}` }], temperature: 0 },
      });
      expect(res.statusCode).toBe(200);
      ids.push((res.json() as { job_id: string }).job_id);
    }
    // One more without the header: immediate, as before (no delivery field).
    const plain = await user.submit(MODEL, 'plain');
    let answered = false;
    void Promise.all(chats).then(() => (answered = true));
    await serve(workers, async () => answered && (await allDelivered(user, [...ids, plain])()));
    for (const [i, res] of (await Promise.all(chats)).entries()) {
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-ins-delivery']).toBe('checked');
      expect((res.json() as { choices: { message: { content: string } }[] }).choices[0]!.message.content).toBe(prose(MODEL, `chat ${i}`));
    }
    for (const [i, { res }] of (await results(user, ids)).entries()) {
      const body = res.json() as { delivery?: string; result: { message: { content: string } } };
      expect(body.delivery).toBe('checked');
      expect(body.result.message.content).toBe(prose(MODEL, `seed ${i}`));
    }
    expect((await user.result(plain)).json()).not.toHaveProperty('delivery');
  });

  it('never streams text that failed its check: the stream carries the checked answer whole', { timeout: 120_000 }, async () => {
    // The lazy node answers first (the only node online), streaming its canned text as it goes.
    const { key, workers } = await start(['lazy', 'honest-1', 'honest-2']);
    const [lazy, ...honest] = workers;
    const stream = t.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}`, 'x-ins-delivery': 'checked' },
      payload: { model: MODEL, messages: [{ role: 'user', content: 'stream me' }], temperature: 0, stream: true },
    });
    let job: Job | null = null;
    await until('the lazy node to get the job', async () => (job = await lazy!.getJob()) !== null);
    expect((await lazy!.post('/worker/job_progress', { job_id: job!.job_id, api_key: job!.api_key, delta: CANNED.slice(0, 20) })).statusCode).toBe(
      200,
    );
    expect((await lazy!.report(job!, CANNED)).statusCode).toBe(200);
    let ended = false;
    void stream.then(() => (ended = true));
    await serve(honest, async () => ended, true);
    const res = await stream;
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-ins-delivery']).toBe('checked');
    const text = res.body
      .split('\n')
      .filter((l) => l.startsWith('data: {'))
      .map((l) => (JSON.parse(l.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? '')
      .join('');
    expect(text).toBe(prose(MODEL, 'stream me'));
    expect(res.body).not.toContain(CANNED.slice(0, 20));
  });

  it('refuses a bad x-ins-delivery with 400 naming it on every door, nothing queued', async () => {
    const { key } = await start(['honest-1']);
    const headers = { authorization: `Bearer ${key}`, api_key: key, 'x-api-key': key, 'x-ins-delivery': 'checkd', 'anthropic-version': '2023-06-01' };
    const doors = [
      { url: '/submit_job', payload: { model: MODEL, messages: [{ role: 'user', content: 'hi' }] } },
      { url: '/v1/chat/completions', payload: { model: MODEL, messages: [{ role: 'user', content: 'hi' }] } },
      { url: '/v1/completions', payload: { model: MODEL, prompt: 'hi' } },
      { url: '/v1/messages', payload: { model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] } },
      { url: '/v1/responses', payload: { model: MODEL, input: 'hi' } },
    ];
    for (const d of doors) {
      const res = await t.app.inject({ method: 'POST', url: d.url, headers, payload: d.payload });
      expect(res.statusCode, d.url).toBe(400);
      expect(res.body, d.url).toContain('x-ins-delivery');
    }
    expect((await q<{ n: number }>('t_jobs', 'SELECT count(*)::int AS n FROM jobs'))[0]!.n).toBe(0);
  });

  it('withholds an answer no other node can check: 503 answer_unchecked, get_result failed with delivery unchecked', async () => {
    const { user, key, workers } = await start(['honest-1']);
    const chat = t.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}`, 'x-ins-delivery': 'checked' },
      payload: { model: MODEL, messages: [{ role: 'user', content: 'alone' }], temperature: 0 },
    });
    const stored = t.app.inject({
      method: 'POST',
      url: '/v1/responses',
      headers: { authorization: `Bearer ${key}`, 'x-ins-delivery': 'checked' },
      payload: { model: MODEL, input: 'alone, stored', temperature: 0 },
    });
    const id = await user.submit(MODEL, 'alone too', {});
    await runCommand(t.db, ['key', 'set-delivery', 'app', 'checked'], bufferIo());
    const held = await user.submit(MODEL, 'alone three');
    let answered = false;
    void chat.then(() => (answered = true));
    await serve(workers, async () => answered && (await user.result(held)).statusCode === 200);
    const res = await chat;
    expect(res.statusCode).toBe(503);
    // The Responses API's stored response does not give the withheld answer either.
    expect((await stored).statusCode).toBe(503);
    const [job] = await q<{ id: string }>('t_resp', "SELECT id::text FROM jobs WHERE request ? 'front' AND kind = 'user'");
    const read = await t.app.inject({ method: 'GET', url: `/v1/responses/${responseId(job!.id)}`, headers: { authorization: `Bearer ${key}` } });
    expect(read.json()).toMatchObject({ status: 'failed', output: [] });
    expect(read.body).not.toContain(prose(MODEL, 'alone, stored').slice(0, 20));
    expect((res.json() as { error: { code: string } }).error.code).toBe('answer_unchecked');
    const body = (await user.result(held)).json() as { status: string; delivery: string; result: { message: { content: string } } };
    expect(body).toMatchObject({ status: 'failed', delivery: 'unchecked' });
    expect(body.result.message.content).toBe('');
    // Submitted before the key was set to checked, without the header: immediate, as before.
    await until('the immediate job to be answered', async () => (await user.result(id)).statusCode === 200);
    expect((await user.result(id)).json()).toMatchObject({ status: 'success', result: { message: { content: prose(MODEL, 'alone too') } } });
  });
});
