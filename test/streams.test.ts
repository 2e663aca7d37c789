// A streamed answer is the job's answer of record, whatever happens to its nodes: through the
// OpenAI-compatible API (the official SDK against a listening server), a node that streams part
// of an answer and then fails — an error report, its lease running out, its worker gone — is
// followed by a node that continues the same text (job_data.answer_prefix), and the client reads
// one coherent answer equal to the record; a node that cannot continue ends the client's stream
// with an error event, never with text that differs from the record; progress of an ended lease
// is refused and never reaches the client. Workers here speak the worker wire by hand
// (test/helpers/coordinator.ts), so each step happens exactly when the test says.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { readChatStream } from './helpers/chat-stream.js';
import { SplitPairs } from '../src/routes/worker/job-progress.js';

type StreamJob = Job & { stream?: boolean; answer_prefix?: string };

/** Resolves once the client has read `want` (called from readChatStream()'s onText). */
function seen(want: string): { onText: (text: string) => void; reached: Promise<void> } {
  let resolve!: () => void;
  const reached = new Promise<void>((r) => (resolve = r));
  return {
    onText: (text) => {
      if (text.startsWith(want)) resolve();
    },
    reached,
  };
}

describe.each(backends)('streams that survive their node on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let client: OpenAI;
  let user: TestUser;
  let url: string;
  let key: string;
  let nodes = 0;

  beforeAll(async () => {
    t = await startApp(backend, { coordinator: { sweepInterval: 0.05 } });
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    key = await t.addUser('streaming-app');
    client = new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
    user = new TestUser(t.app, key);
  });
  afterAll(async () => {
    await t.close();
  });

  const worker = async (model: string) => {
    const name = `streamer-${++nodes}`;
    return new TestWorker(t.app, name, await t.addNode(name)).start([model]);
  };
  const progress = (w: TestWorker, job: Job, delta: string) => w.post('/worker/job_progress', { job_id: job.job_id, api_key: job.api_key, delta });
  const recorded = async (jobId: string) => {
    const r = await user.result(jobId);
    return (r.json() as { result: { message: { content: string } } }).result.message.content;
  };
  const ask = (model: string) =>
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'tell a story' }], stream: true, temperature: 0 });

  /** The first node streams "Once upon " and then fails as `fail` says; returns what the second node is given. */
  async function firstNodeFails(model: string, fail: (w: TestWorker, job: StreamJob) => Promise<void>) {
    const first = await worker(model);
    const second = await worker(model);
    const reached = seen('Once upon ');
    const reading = readChatStream(await ask(model), reached.onText);
    const job = (await first.getJob(5)) as StreamJob;
    expect(job.stream).toBe(true);
    expect(job.answer_prefix).toBeUndefined();
    expect((await progress(first, job, 'Once ')).statusCode).toBe(200);
    expect((await progress(first, job, 'upon ')).statusCode).toBe(200);
    await reached.reached;
    await fail(first, job);
    const next = (await second.getJob(5)) as StreamJob;
    expect(next.job_id).toBe(job.job_id);
    return { first, job, second, next, reading };
  }

  it('continues the answer on the next node after a backend error mid-stream: one text, equal to the record, finished with stop', async () => {
    const { first, job, second, next, reading } = await firstNodeFails('story-error', async (w, j) => {
      expect((await w.report(j, '', 'error')).statusCode).toBe(200);
    });
    expect(next.answer_prefix).toBe('Once upon ');
    // Progress of the first lease is refused now, and never reaches the client.
    expect((await progress(first, job, 'GARBLED ')).statusCode).toBe(400);
    expect((await progress(second, next, 'a time ')).statusCode).toBe(200);
    expect(
      (
        await second.post('/worker/update_result', {
          job_id: next.job_id,
          api_key: next.api_key,
          model_name: next.model,
          status: 'success',
          result: { message: { role: 'assistant', content: 'Once upon a time there was a stream.' } },
          usage: { prompt_tokens: 3, completion_tokens: 7 },
        })
      ).statusCode,
    ).toBe(200);
    const got = await reading;
    expect(got).toEqual({ text: 'Once upon a time there was a stream.', finish: 'stop', error: null });
    expect(await recorded(job.job_id)).toBe(got.text);
  });

  it('relays a character split between two pieces whole (a UTF-16 pair cut by length): the text is the record, finished with stop', async () => {
    const w = await worker('story-emoji');
    const reading = readChatStream(await ask('story-emoji'));
    const job = (await w.getJob(5)) as StreamJob;
    for (const piece of ['h\u00e9', 'llo \ud83d', '\ude00\ud83d\udc68', '\u200d\ud83d\udc69\u200d', '\ud83d\udc67 \u65e5']) {
      expect((await progress(w, job, piece)).statusCode).toBe(200);
    }
    const whole = 'h\u00e9llo \ud83d\ude00\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67 \u65e5\u672c';
    expect((await w.report(job, whole)).statusCode).toBe(200);
    expect(await reading).toEqual({ text: whole, finish: 'stop', error: null });
  });

  it('continues the answer after the first lease runs out (its worker vanished)', async () => {
    const { job, second, next, reading } = await firstNodeFails('story-expiry', async (_w, j) => {
      await t.db.query(
        sql('t_expire', "UPDATE job_leases SET expires_at = now() - interval '1 second' WHERE job_id = $1::uuid AND ended_at IS NULL"),
        [j.job_id],
      );
    });
    expect(next.answer_prefix).toBe('Once upon ');
    expect((await second.report(next, 'Once upon a midnight.')).statusCode).toBe(200);
    const got = await reading;
    expect(got).toEqual({ text: 'Once upon a midnight.', finish: 'stop', error: null });
    expect(await recorded(job.job_id)).toBe(got.text);
  });

  it("ends the stream with an error event when the node that finishes the job did not continue it (the seed's worker)", async () => {
    const { job, second, next, reading } = await firstNodeFails('story-fresh', async (w) => {
      expect((await w.deregister()).statusCode).toBe(200);
    });
    expect(next.answer_prefix).toBe('Once upon ');
    // A worker that ignores answer_prefix answers from the start, with another text.
    expect((await second.report(next, 'In a galaxy far away.')).statusCode).toBe(200);
    const got = await reading;
    expect(got.error).toBe('answer_diverged');
    expect(got.finish).toBeNull();
    // What the client read is a beginning it was told is not the answer; the record is the node's.
    expect(got.text).toBe('Once upon ');
    expect(await recorded(job.job_id)).toBe('In a galaxy far away.');
  });

  it('keeps and relays at most the cap per lease, always the true beginning: the record fills in the rest', async () => {
    const w = await worker('story-long');
    const reading = readChatStream(await ask('story-long'));
    const job = (await w.getJob(5))!;
    const big = 'x'.repeat(40_000);
    expect((await progress(w, job, big)).statusCode).toBe(200);
    expect((await progress(w, job, big)).statusCode).toBe(200);
    expect((await progress(w, job, 'y')).statusCode).toBe(200);
    const [lease] = await t.db.query<{ n: number }>(
      sql('t_partial', 'SELECT char_length(partial)::int AS n FROM job_leases WHERE job_id = $1::uuid'),
      [job.job_id],
    );
    expect(lease!.n).toBe(65_536);
    expect((await w.report(job, `${big}${big}y`)).statusCode).toBe(200);
    const got = await reading;
    expect(got.text).toBe(`${big}${big}y`);
    expect(got.finish).toBe('stop');
  });

  it('tells a streaming client where its job stands while it waits, as SSE comments', async () => {
    await worker('story-queued'); // serves the model, takes nothing
    await user.submit('story-queued', 'ahead');
    const gone = new AbortController();
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      signal: gone.signal,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'story-queued', stream: true, messages: [{ role: 'user', content: 'behind' }] }),
    });
    const reader = res.body!.getReader();
    let text = '';
    while (!/: queue \{"state":"queued","position":1,/.test(text)) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    gone.abort();
    expect(text).toMatch(/^data: .*"role":"assistant"/);
    expect(text).toMatch(/\n: queue \{"state":"queued","position":1,"eta_seconds":null\}\n\n/);
  });

  it('charges the finishing attempt and the attempts whose streamed text it continued, never another error report', async () => {
    // Streamed: the first node's text is the answer's beginning, and its usage is charged with the continuer's.
    const first = await worker('story-usage');
    const second = await worker('story-usage');
    const reading = readChatStream(await ask('story-usage'));
    const a = (await first.getJob(5)) as StreamJob;
    expect((await progress(first, a, 'Once')).statusCode).toBe(200);
    await first.post('/worker/update_result', {
      job_id: a.job_id,
      api_key: a.api_key,
      model_name: a.model,
      status: 'error',
      result: { message: '' },
      usage: { prompt_tokens: 5, completion_tokens: 2 },
    });
    const b = (await second.getJob(5)) as StreamJob;
    expect(b).toMatchObject({ job_id: a.job_id, answer_prefix: 'Once' });
    await second.post('/worker/update_result', {
      job_id: b.job_id,
      api_key: b.api_key,
      model_name: b.model,
      status: 'success',
      result: { message: 'Once done' },
      usage: { prompt_tokens: 5, completion_tokens: 9 },
    });
    expect((await reading).text).toBe('Once done');
    expect((await user.result(a.job_id)).json()).toMatchObject({ status: 'success', usage: { prompt_tokens: 10, completion_tokens: 11 } });
    // Not streamed: the failed attempt left nothing of the answer, so its usage is not charged.
    const jobId = await user.submit('story-usage', 'count me', { temperature: 0 });
    const c = (await first.getJob())!;
    expect(c.job_id).toBe(jobId);
    await first.post('/worker/update_result', {
      job_id: c.job_id,
      api_key: c.api_key,
      model_name: c.model,
      status: 'error',
      result: { message: '' },
      usage: { prompt_tokens: 5, completion_tokens: 2 },
    });
    const d = (await second.getJob())!;
    expect(d.job_id).toBe(jobId);
    await second.post('/worker/update_result', {
      job_id: d.job_id,
      api_key: d.api_key,
      model_name: d.model,
      status: 'success',
      result: { message: 'done' },
      usage: { prompt_tokens: 5, completion_tokens: 9 },
    });
    expect((await user.result(jobId)).json()).toMatchObject({ status: 'success', usage: { prompt_tokens: 5, completion_tokens: 9 } });
  });
});

describe.each(backends)('a worker that stops sending progress, on $name', (backend) => {
  it('gives its job back HEARTBEAT_TIMEOUT after it last renewed the lease, not LEASE_TIMEOUT: the stream goes on on another node', async () => {
    // 2 s (the setting's least is 6 s; the coordinator takes any): the test waits it out once.
    const t = await startApp(backend, { coordinator: { sweepInterval: 0.2, leaseTimeout: 180, heartbeatTimeout: 2 } });
    try {
      const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
      const client = new OpenAI({ apiKey: await t.addUser('app'), baseURL: `${url}/v1`, maxRetries: 0 });
      const [first, second] = await Promise.all(
        ['dies', 'lives'].map(async (name) => new TestWorker(t.app, name, await t.addNode(name)).start(['story-heartbeat'])),
      );
      // How long the first lease lasts from its start (a state, not a clock: a loaded machine may stall between two steps).
      const leaseLength = async (jobId: string) =>
        (
          await t.db.query<{ s: number }>(
            sql(
              't_lease_length',
              'SELECT extract(epoch FROM expires_at - leased_at)::float8 AS s FROM job_leases WHERE job_id = $1::uuid AND attempt = 1',
            ),
            [jobId],
          )
        )[0]!.s;
      const reading = readChatStream(
        await client.chat.completions.create({ model: 'story-heartbeat', messages: [{ role: 'user', content: 'tell a story' }], stream: true }),
      );
      const job = (await first!.getJob(5)) as StreamJob;
      // Before any progress the lease is LEASE_TIMEOUT's (the seed's workers send none); the first
      // progress renews it to 2 s from then, far below that.
      expect(await leaseLength(job.job_id)).toBeCloseTo(180, 0);
      expect((await first!.post('/worker/job_progress', { job_id: job.job_id, api_key: job.api_key, delta: 'Once ' })).statusCode).toBe(200);
      expect(await leaseLength(job.job_id)).toBeLessThan(60);
      // The worker dies: nothing more from it. The other node gets the job long before 180 s.
      const next = (await second!.getJob(30)) as StreamJob;
      expect(next.job_id).toBe(job.job_id);
      expect(next.answer_prefix).toBe('Once ');
      expect((await second!.report(next, 'Once more, with feeling.')).statusCode).toBe(200);
      expect(await reading).toEqual({ text: 'Once more, with feeling.', finish: 'stop', error: null });
      const [ended] = await t.db.query<{ outcome: string }>(
        sql('t_lease_outcome', 'SELECT outcome FROM job_leases WHERE job_id = $1::uuid AND attempt = 1'),
        [job.job_id],
      );
      expect(ended!.outcome).toBe('expired');
    } finally {
      await t.close();
    }
  });
});

describe('a UTF-16 pair split between two progress pieces', () => {
  it('is joined for a job key, and what a stranger sends holds nothing', () => {
    const pairs = new SplitPairs();
    const key = `jk_${'a'.repeat(43)}`;
    expect(pairs.join(key, 'llo \ud83d')).toBe('llo ');
    expect(pairs.size).toBe(1);
    expect(pairs.join(key, '\ude00!')).toBe('\ud83d\ude00!');
    expect(pairs.size).toBe(0);
    // Not a key the service could have issued (a node key, a megabyte of text): passed on as it is, for the validator.
    for (const stranger of ['nk_abc', `jk_${'x'.repeat(100_000)}`, 'anything']) expect(pairs.join(stranger, 'a\ud83d')).toBe('a\ud83d');
    expect(pairs.size).toBe(0);
  });
});
