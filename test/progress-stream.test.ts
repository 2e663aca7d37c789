// A job's progress over one request (POST /worker/job_progress_stream, issue 56), on a listening
// app: the lines a worker writes reach the client streaming the job in order, each answered in
// order; a cancel ends the stream at the worker's next line; a node that dies mid-stream is
// continued by another without a garbled text; the per-piece job_progress still works beside it;
// bad lines are refused with nothing kept; across two servers on one PostgreSQL database the
// text reaches the client's server. Workers speak the wire by hand, so each step happens when
// the test says.
import OpenAI from 'openai';
import { PassThrough } from 'node:stream';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type Database } from '../src/db/database.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { addApiKey } from '../src/nodes/api-keys.js';
import { backends, TEST_DATABASE_URL } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { readChatStream } from './helpers/chat-stream.js';
import { twoServers } from './helpers/two-servers.js';

type StreamJob = Job & { stream?: boolean; answer_prefix?: string };

/** A progress stream written by hand: `write` a line, `answer` the next answer line (undefined at its end). */
async function openStream(url: string, first: unknown) {
  const body = new PassThrough();
  const write = (line: unknown) => body.write(typeof line === 'string' ? line : `${JSON.stringify(line)}\n`);
  write(first);
  const res = await request(`${url}/worker/job_progress_stream`, { method: 'POST', headers: { 'content-type': 'application/x-ndjson' }, body });
  const chunks = res.body[Symbol.asyncIterator]();
  let rest = '';
  return {
    status: res.statusCode,
    write,
    end: () => body.end(),
    text: () => res.body.text(),
    async answer(): Promise<{ status: string; detail?: string } | undefined> {
      for (;;) {
        const at = rest.indexOf('\n');
        if (at >= 0) {
          const line = rest.slice(0, at);
          rest = rest.slice(at + 1);
          return JSON.parse(line) as { status: string; detail?: string };
        }
        const next = await chunks.next();
        if (next.done) {
          body.end();
          return undefined;
        }
        rest += String(next.value);
      }
    },
  };
}

/** The client's text as it grows; `reached(want)` resolves once it begins with `want`. */
function watcher() {
  let text = '';
  const waiting: { want: string; resolve: () => void }[] = [];
  return {
    onText: (t: string) => {
      text = t;
      for (const w of waiting.filter((x) => text.startsWith(x.want))) w.resolve();
    },
    reached: (want: string) => (text.startsWith(want) ? Promise.resolve() : new Promise<void>((resolve) => waiting.push({ want, resolve }))),
  };
}

const partialOf = async (db: Database, jobId: string) =>
  (
    await db.query<{ partial: string }>(
      sql('t_stream_partial', 'SELECT partial FROM job_leases WHERE job_id = $1::uuid ORDER BY attempt DESC LIMIT 1'),
      [jobId],
    )
  )[0]?.partial;

describe.each(backends)('job progress over one stream on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let url: string;
  let client: OpenAI;
  let user: TestUser;
  let nodes = 0;

  beforeAll(async () => {
    t = await startApp(backend, { coordinator: { sweepInterval: 0.05 } });
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    const key = await t.addUser('streaming-app');
    client = new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
    user = new TestUser(t.app, key);
  });
  afterAll(async () => {
    await t.close();
  });

  const worker = async (model: string) => {
    const name = `stream-node-${++nodes}`;
    return new TestWorker(t.app, name, await t.addNode(name)).start([model]);
  };
  const ask = (model: string) =>
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'tell a story' }], stream: true, temperature: 0 });

  it('relays the lines in order as they come, answers each in order, and the per-piece job_progress goes on after it', async () => {
    const w = await worker('stream-order');
    const seen = watcher();
    const reading = readChatStream(await ask('stream-order'), seen.onText);
    const job = (await w.getJob(5)) as StreamJob;
    expect(job.stream).toBe(true);
    const s = await openStream(url, { job_id: job.job_id, api_key: job.api_key });
    expect(s.status).toBe(200);
    expect(await s.answer()).toEqual({ status: 'success' });
    let want = '';
    for (const piece of ['Once ', 'upon ', 'a ', '', 'time']) {
      s.write({ delta: piece });
      expect(await s.answer()).toEqual({ status: 'success' });
      want += piece;
      await seen.reached(want);
    }
    // Lines written together are kept together, and each is answered.
    s.write(`${JSON.stringify({ delta: ' there' })}\n${JSON.stringify({ delta: ' was' })}\n`);
    expect([await s.answer(), await s.answer()]).toEqual([{ status: 'success' }, { status: 'success' }]);
    await seen.reached('Once upon a time there was');
    s.end();
    expect(await s.answer()).toBeUndefined();
    // The old wire, after the stream: its piece continues the text.
    expect((await w.post('/worker/job_progress', { job_id: job.job_id, api_key: job.api_key, delta: ' a' })).statusCode).toBe(200);
    await seen.reached('Once upon a time there was a');
    expect(await partialOf(t.db, job.job_id)).toBe('Once upon a time there was a');
    expect((await w.report(job, 'Once upon a time there was a stream.')).statusCode).toBe(200);
    expect(await reading).toEqual({ text: 'Once upon a time there was a stream.', finish: 'stop', error: null });
  });

  it('answers "ended" at the next line once the job is canceled, and keeps nothing after it', async () => {
    const w = await worker('stream-cancel');
    const gone = new AbortController();
    const seen = watcher();
    const stream = await client.chat.completions.create(
      { model: 'stream-cancel', messages: [{ role: 'user', content: 'tell a story' }], stream: true },
      { signal: gone.signal },
    );
    const reading = readChatStream(stream, seen.onText);
    const job = (await w.getJob(5)) as StreamJob;
    const s = await openStream(url, { job_id: job.job_id, api_key: job.api_key, delta: 'Once ' });
    expect(await s.answer()).toEqual({ status: 'success' });
    await seen.reached('Once ');
    // The client hangs up: its job is canceled.
    gone.abort();
    await reading;
    await expect.poll(async () => (await user.result(job.job_id)).json().status, { timeout: 10_000 }).toBe('canceled');
    // The worker's next line — a heartbeat — hears it, and the answer ends.
    s.write({ delta: '' });
    const ended = await s.answer();
    expect(ended?.status).toBe('ended');
    expect(ended?.detail).toMatch(/canceled, expired or finished/);
    expect(await s.answer()).toBeUndefined();
    expect(await partialOf(t.db, job.job_id)).toBe('Once ');
  });

  it("continues a dead node's stream on the next node: one text, equal to the record", async () => {
    const first = await worker('stream-death');
    const second = await worker('stream-death');
    const seen = watcher();
    const reading = readChatStream(await ask('stream-death'), seen.onText);
    const job = (await first.getJob(5)) as StreamJob;
    const s = await openStream(url, { job_id: job.job_id, api_key: job.api_key, delta: 'Once ' });
    expect(await s.answer()).toEqual({ status: 'success' });
    s.write({ delta: 'upon ' });
    expect(await s.answer()).toEqual({ status: 'success' });
    await seen.reached('Once upon ');
    // The node dies: its stream is cut mid-way and its lease runs out.
    s.end();
    await t.db.query(
      sql('t_stream_expire', "UPDATE job_leases SET expires_at = now() - interval '1 second' WHERE job_id = $1::uuid AND ended_at IS NULL"),
      [job.job_id],
    );
    const next = (await second.getJob(10)) as StreamJob;
    expect(next.job_id).toBe(job.job_id);
    expect(next.answer_prefix).toBe('Once upon ');
    // The dead lease's stream takes nothing more.
    const late = await openStream(url, { job_id: job.job_id, api_key: job.api_key, delta: 'GARBLED ' });
    expect(late.status).toBe(400);
    await late.text();
    const s2 = await openStream(url, { job_id: next.job_id, api_key: next.api_key, delta: 'a time ' });
    expect(await s2.answer()).toEqual({ status: 'success' });
    s2.write({ delta: 'there was' });
    expect(await s2.answer()).toEqual({ status: 'success' });
    await seen.reached('Once upon a time there was');
    s2.end();
    expect(await s2.answer()).toBeUndefined();
    expect((await second.report(next, 'Once upon a time there was a stream.')).statusCode).toBe(200);
    expect(await reading).toEqual({ text: 'Once upon a time there was a stream.', finish: 'stop', error: null });
  });

  it('refuses a bad first line with the status job_progress would give, and a bad later line with an error line, keeping nothing of either', async () => {
    const w = await worker('stream-bad');
    const reading = readChatStream(await ask('stream-bad'));
    const job = (await w.getJob(5)) as StreamJob;
    const refused = async (first: unknown) => {
      const s = await openStream(url, first);
      const body = await s.text();
      s.end();
      return { status: s.status, body };
    };
    const notJson = await refused('{"job_id": \n');
    expect(notJson.status).toBe(422);
    expect(JSON.parse(notJson.body).detail[0].type).toBe('json_invalid');
    const noKey = await refused({ job_id: job.job_id, delta: 'x' });
    expect(noKey.status).toBe(422);
    expect(JSON.parse(noKey.body).detail[0]).toMatchObject({ type: 'missing', loc: ['body', 'api_key'] });
    const wrongKey = await refused({ job_id: job.job_id, api_key: `jk_${'A'.repeat(43)}`, delta: 'x' });
    expect(wrongKey.status).toBe(400);
    const tooLong = await refused({ job_id: job.job_id, api_key: job.api_key, delta: 'x'.repeat(65_537) });
    expect(tooLong.status).toBe(422);
    expect(await partialOf(t.db, job.job_id)).toBe('');
    // A good first line, then a bad one: the lines before it are kept, it and those after it are not.
    const s = await openStream(url, { job_id: job.job_id, api_key: job.api_key, delta: 'Kept' });
    expect(await s.answer()).toEqual({ status: 'success' });
    s.write({ delta: 42 });
    s.write({ delta: 'after' });
    const bad = await s.answer();
    expect(bad?.status).toBe('error');
    expect(bad?.detail).toMatch(/string_type/);
    expect(await s.answer()).toBeUndefined();
    expect(await partialOf(t.db, job.job_id)).toBe('Kept');
    expect((await w.report(job, 'Kept whole.')).statusCode).toBe(200);
    expect((await reading).text).toBe('Kept whole.');
  });
});

describe.runIf(TEST_DATABASE_URL)('a progress stream on one server, its client on another (one PostgreSQL database)', () => {
  const { dbs, apps, urls } = twoServers({ pool: 5, app: { verify: { enabled: false } }, listen: true });

  it("relays the text, in order, to the client's server", async () => {
    const [a] = apps as [(typeof apps)[0]];
    const worker = await new TestWorker(a, 'node-a', (await createNode(dbs[0]!, 'node-a')).key).start(['shared-stream']);
    const client = new OpenAI({ apiKey: (await addApiKey(dbs[1]!, 'user', 'app')).key, baseURL: `${urls[1]}/v1`, maxRetries: 0 });
    const seen = watcher();
    const reading = readChatStream(
      await client.chat.completions.create({ model: 'shared-stream', messages: [{ role: 'user', content: 'hi' }], stream: true }),
      seen.onText,
    );
    const job = (await worker.getJob(10)) as StreamJob;
    const s = await openStream(urls[0]!, { job_id: job.job_id, api_key: job.api_key, delta: 'Across ' });
    expect(await s.answer()).toEqual({ status: 'success' });
    let want = 'Across ';
    await seen.reached(want);
    for (const piece of ['two ', 'servers']) {
      s.write({ delta: piece });
      expect(await s.answer()).toEqual({ status: 'success' });
      want += piece;
      await seen.reached(want);
    }
    s.end();
    expect(await s.answer()).toBeUndefined();
    expect((await worker.report(job, 'Across two servers.')).statusCode).toBe(200);
    expect(await reading).toEqual({ text: 'Across two servers.', finish: 'stop', error: null });
  });
});
