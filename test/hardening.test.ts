// Issue 20's attacks, performed against the real app on each backend: what a hostile node,
// user or stranger could do to the coordinator, each now refused without harming anyone else.
// (Access control — register_node's keyless window, daily_points, long polls, rate-limit keys —
// is in test/hardening-access.test.ts.)
import { afterEach, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { buildApp } from '../src/app.js';
import type { VerifyConfig } from '../src/config-verify.js';
import { backends } from './helpers/db.js';
import { startApp, type TestApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { until } from './helpers/wait.js';
import { loggerInto } from './helpers/log-lines.js';

const MODEL = 'hardening-model';
// Audits on, and nothing random or timed in them: no copies, no probes, no speed cap.
const AUDIT: Partial<VerifyConfig> = { enabled: true, share: 0, probeInterval: 0, maxTokensPerSecond: 0 };

const verificationCount = async (app: TestApp, event: string): Promise<number> =>
  (await app.metrics.verification.get()).values.find((v) => v.labels.event === event)?.value ?? 0;

/** `{"a": {"a": … leaf}}`, `depth` objects deep, as JSON text (JSON.stringify would overflow its stack first). */
const nestedText = (depth: number, leaf: string): string => `${'{"a":'.repeat(depth)}${leaf}${'}'.repeat(depth)}`;
const nested = (depth: number, leaf: unknown): unknown => JSON.parse(nestedText(depth, JSON.stringify(leaf)));

type Reply = Awaited<ReturnType<TestWorker['report']>>;
type Send = () => Promise<Reply>;

/**
 * Sends the honest requests among the hostile ones, spread evenly and all at once, so that
 * they share batches; resolves with the replies of each kind.
 */
async function together(honest: Send[], hostile: Send[]): Promise<{ honest: Reply[]; hostile: Reply[] }> {
  const every = Math.max(1, Math.floor(hostile.length / honest.length));
  const order: { honest: boolean; send: Send }[] = [];
  let h = 0;
  hostile.forEach((send, i) => {
    if (i % every === 0 && h < honest.length) order.push({ honest: true, send: honest[h++]! });
    order.push({ honest: false, send });
  });
  while (h < honest.length) order.push({ honest: true, send: honest[h++]! });
  const replies = await Promise.all(order.map((o) => o.send()));
  return { honest: replies.filter((_, i) => order[i]!.honest), hostile: replies.filter((_, i) => !order[i]!.honest) };
}

describe.each(backends)('finding 2 on $name: strangers cannot make honest reports and submissions fail', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  it('honest job-key reports sent among reports carrying a NUL nested 66 deep are all taken', async () => {
    t = await startApp(backend);
    const user = new TestUser(t.app, await t.addUser());
    const workers: TestWorker[] = [];
    for (let i = 0; i < 24; i++) workers.push(await new TestWorker(t.app, `honest-${i}`, await t.addNode(`honest-${i}`)).start([MODEL]));
    for (let i = 0; i < 24; i++) await user.submit(MODEL, `question ${i}`);
    const jobs = await Promise.all(workers.map(async (w) => (await w.getJob())!));
    expect(jobs.every((j) => j !== null)).toBe(true);

    // Any api_key beginning with jk_ is a job-key report; the NUL sits deeper than the old check looked.
    const hostile = Array.from(
      { length: 288 },
      (_, i) => () =>
        t.app.inject({
          method: 'POST',
          url: '/worker/update_result',
          payload: {
            job_id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
            api_key: `jk_stranger-${i}`,
            model_name: MODEL,
            result: nested(66, 'a\u0000b'),
            status: 'success',
          },
        }),
    );
    const replies = await together(
      jobs.map((job, i) => () => workers[i]!.report(job)),
      hostile,
    );
    expect(replies.honest.map((r) => r.statusCode)).toEqual(Array(24).fill(200));
    const hostileReplies = replies.hostile;
    // A job key's answer has its NUL replaced (the next test), so these are refused for their keys.
    expect(new Set(hostileReplies.map((r) => r.statusCode))).toEqual(new Set([400]));
    expect(hostileReplies[0]!.json()).toEqual({ detail: 'Unknown job key' });
    const [done] = await t.db.query<{ n: number }>(sql('t_done', "SELECT count(*)::int AS n FROM jobs WHERE state = 'done'"));
    expect(done!.n).toBe(24);
  });

  it("keeps an honest job-key answer holding a NUL or an unpaired surrogate, with U+FFFD in their place: no 422, which would stop the seed's worker", async () => {
    t = await startApp(backend);
    const user = new TestUser(t.app, await t.addUser());
    const w = await new TestWorker(t.app, 'odd-output', await t.addNode('odd-output')).start([MODEL]);
    for (const [content, kept] of [
      ['abc\u0000def', 'abc\ufffddef'],
      ['bad \ud800 surrogate, good \ud83d\ude00', 'bad \ufffd surrogate, good \ud83d\ude00'],
    ]) {
      const id = await user.submit(MODEL, `say ${kept}`);
      const job = (await w.getJob())!;
      expect(job.job_id).toBe(id);
      expect((await w.post('/worker/job_progress', { job_id: job.job_id, api_key: job.api_key, delta: content!.slice(0, 4) })).statusCode).toBe(200);
      const reported = await w.report(job, content);
      expect(reported.statusCode).toBe(200);
      expect(reported.json()).toMatchObject({ status: 'success', replayed: false });
      // The same report again is the same report.
      expect((await w.report(job, content)).json()).toMatchObject({ replayed: true });
      const r = await user.result(id);
      expect(r.statusCode).toBe(200);
      expect(r.json().result.message.content).toBe(kept);
    }
    // A node key's report keeps the original contract's 422 (docs/api.md).
    const nodeKey = await t.addNode('node-key-reporter');
    const res = await t.app.inject({
      method: 'POST',
      url: '/worker/update_result',
      payload: { job_id: 'nk-1', api_key: nodeKey, model_name: MODEL, result: { message: 'a\u0000b' }, status: 'success' },
    });
    expect(res.statusCode).toBe(422);
    // A key holding one is no key, as FastAPI finds it: 401 (400 for a job key), not a 422.
    const noKey = await t.app.inject({
      method: 'POST',
      url: '/worker/update_result',
      payload: { job_id: 'nk-2', api_key: `${nodeKey}\u0000`, model_name: MODEL, result: { message: 'ok' }, status: 'success' },
    });
    expect(noKey.statusCode).toBe(401);
    expect(noKey.json()).toEqual({ detail: 'Invalid API key' });
  });

  it("a user sending NULs through /v1 does not make another user's submit_job fail", async () => {
    t = await startApp(backend);
    await new TestWorker(t.app, 'server', await t.addNode('server')).start([MODEL]);
    const attacker = await t.addUser('attacker');
    const other = await t.addUser('other');
    const hostile = Array.from(
      { length: 64 },
      (_, i) => () =>
        t.app.inject({
          method: 'POST',
          url: i % 2 ? '/v1/chat/completions' : '/chat/completions',
          headers: { authorization: `Bearer ${attacker}` },
          payload: {
            model: MODEL,
            messages: [{ role: 'user', content: i % 4 < 2 ? `evil\u0000${i}` : [{ type: 'text', text: `evil\ud800${i}` }] }],
            request_timeout_time: 1,
          },
        }),
    );
    const honest = Array.from(
      { length: 16 },
      (_, i) => () =>
        t.app.inject({
          method: 'POST',
          url: '/submit_job',
          headers: { api_key: other },
          payload: { model: MODEL, messages: [{ role: 'user', content: `honest ${i}` }], max_output: 0, temperature: 0 },
        }),
    );
    const replies = await together(honest, hostile);
    expect(replies.honest.map((r) => r.statusCode)).toEqual(Array(16).fill(200));
    const hostileReplies = replies.hostile;
    expect(new Set(hostileReplies.map((r) => r.statusCode))).toEqual(new Set([400]));
    expect(hostileReplies[0]!.json()).toMatchObject({ error: { type: 'invalid_request_error', param: 'messages[0].content' } });
    const [jobs] = await t.db.query<{ n: number }>(sql('t_jobs', 'SELECT count(*)::int AS n FROM jobs'));
    expect(jobs!.n).toBe(16);
  });

  it('answers a result nested 100,000 deep, and a malformed body nested 900,000 deep, with a 400, not a 500', async () => {
    t = await startApp(backend);
    const key = await t.addNode('deep');
    const body = (result: string) => `{"job_id": "deep-1", "api_key": "${key}", "model_name": "${MODEL}", "status": "success", "result": ${result}}`;
    const post = (payload: string, url = '/worker/update_result') =>
      t.app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload });
    for (const res of [await post(body(nestedText(100_000, '1'))), await post('['.repeat(900_000)), await post('{"a":'.repeat(200_000))]) {
      expect(res.statusCode, res.body.slice(0, 200)).toBe(400);
      expect(res.json()).toEqual({ detail: 'There was an error parsing the body' });
    }
    // The same through the OpenAI-compatible API: its own error shape, still a 400.
    const openai = await post(
      `{"model": "${MODEL}", "messages": [{"role": "user", "content": ${nestedText(100_000, '"x"')}}]}`,
      '/v1/chat/completions',
    );
    expect(openai.statusCode).toBe(400);
    expect(openai.json()).toMatchObject({ error: { type: 'invalid_request_error' } });
    // Nesting up to the limit is fine, and a NUL at its bottom is found.
    expect((await post(body(nestedText(500, '1')))).statusCode).toBe(200);
    const nul = await post(body(nestedText(500, '"\\u0000"')).replace('deep-1', 'deep-2'));
    expect(nul.statusCode).toBe(422);
    expect(nul.json()).toMatchObject({ detail: [{ type: 'value_error', loc: ['body', 'result'] }] });
    const [n] = await t.db.query<{ n: number }>(sql('t_results', 'SELECT count(*)::int AS n FROM job_results'));
    expect(n!.n).toBe(1);
  });
});

describe.each(backends)('finding 1 on $name: one report cannot switch verification off', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());
  const count = async (name: string, text: string) => (await t.db.query<{ n: number }>(sql(name, text)))[0]!.n;
  const answer = (job: Job) => `a long enough answer of more than eight words to ${job.messages.at(-1)!.content}`;

  it('refuses a token count beyond an int, ignores one in result.usage, and audits every job after it', async () => {
    t = await startApp(backend, { verify: AUDIT });
    const user = new TestUser(t.app, await t.addUser());
    const w = await new TestWorker(t.app, 'counter', await t.addNode('counter')).start([MODEL]);
    const send = (job: Job, extra: Record<string, unknown>, resultUsage?: unknown) =>
      w.post('/worker/update_result', {
        job_id: job.job_id,
        api_key: job.api_key,
        model_name: job.model,
        status: 'success',
        ...extra,
        result: { message: { role: 'assistant', content: answer(job) }, ...(resultUsage ? { usage: resultUsage } : {}) },
      });
    const first = await user.submit(MODEL, 'question 0');
    const job = (await w.getJob())!;
    // The attack of the issue: accepted (200, 1 point) and then every audit batch failed.
    const refused = await send(job, { usage: { completion_tokens: 3_000_000_000 } });
    expect(refused.statusCode).toBe(422);
    expect(refused.json()).toMatchObject({
      detail: [{ type: 'less_than_equal', loc: ['body', 'usage', 'completion_tokens'], ctx: { le: 2147483647 } }],
    });
    // The same count in result.usage is not kept; the rest of the usage is, and the missing count
    // is estimated from the answer (jobs/answer.ts), which get_result does not show.
    expect((await send(job, {}, { completion_tokens: 3_000_000_000, prompt_tokens: 5 })).statusCode).toBe(200);
    expect((await user.result(first)).json()).toEqual({ status: 'success', job_id: first, result: expect.anything() });
    const [kept] = await t.db.query<{ usage: unknown }>(sql('t_kept_usage', 'SELECT usage FROM jobs WHERE id = $1::uuid'), [first]);
    expect(kept!.usage).toEqual({ prompt_tokens: 5, completion_tokens: Math.ceil(Buffer.byteLength(answer(job)) / 4), estimated: true });
    // The next jobs carry the same count, and are audited all the same.
    for (let i = 1; i <= 12; i++) {
      await user.submit(MODEL, `question ${i}`);
      const next = (await w.getJob())!;
      expect((await send(next, {}, { completion_tokens: 3_000_000_000 + i })).statusCode).toBe(200);
    }
    await until('every job audited', async () => (await verificationCount(t.app, 'audited')) === 13, 20_000);
    expect(await count('t_unaudited', 'SELECT count(*)::int AS n FROM job_audits')).toBe(0);
    expect(await verificationCount(t.app, 'set_aside')).toBe(0);
  });

  it('sets aside a job whose audit fails (logged and counted) and audits the others, rows from before the fix included', async () => {
    t = await startApp(backend);
    const user = new TestUser(t.app, await t.addUser());
    const w = await new TestWorker(t.app, 'old-rows', await t.addNode('old-rows')).start([MODEL]);
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      ids.push(await user.submit(MODEL, `question ${i}`));
      const job = (await w.getJob())!;
      expect((await w.report(job, answer(job))).statusCode).toBe(200);
    }
    // As an older version left them: a token count no int holds, and a request no audit can read.
    await t.db.query(sql('t_poison_usage', `UPDATE jobs SET usage = '{"completion_tokens": 3000000000}' WHERE id = $1::uuid`), [ids[1]]);
    await t.db.query(sql('t_poison_request', `UPDATE jobs SET request = '{"messages": 5, "temperature": 0}' WHERE id = $1::uuid`), [ids[3]]);
    await t.db.query(sql('t_queue_audits', "INSERT INTO job_audits (job_id, finished_at) SELECT id, finished_at FROM jobs WHERE state = 'done'"));

    // Another server, auditing: what it logs is kept.
    const lines: { msg: string; jobs?: { jobId: string; error: string }[] }[] = [];
    const logger = loggerInto(lines);
    const auditor = await buildApp({ db: t.db, logger, verify: AUDIT });
    try {
      await until(
        'the queue of audits to empty',
        async () => (await count('t_unaudited', 'SELECT count(*)::int AS n FROM job_audits')) === 0,
        20_000,
      );
      await until(
        'the report of the audit',
        async () => (await verificationCount(auditor, 'audited')) + (await verificationCount(auditor, 'set_aside')) === 6,
        20_000,
      );
      expect(await verificationCount(auditor, 'audited')).toBe(5);
      expect(await verificationCount(auditor, 'set_aside')).toBe(1);
      const told = lines.find((l) => l.jobs);
      expect(told?.msg).toMatch(/set aside/);
      expect(told?.jobs).toEqual([{ jobId: ids[3], error: expect.any(String) as string }]);
    } finally {
      await auditor.close();
    }
  });
});
