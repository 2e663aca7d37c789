// The OpenAI-compatible API driven by the real `openai` SDK against a listening server, with a
// worker loop (the real worker's wire) answering jobs deterministically: completions plain and
// streamed (with usage), the model list, and the errors the SDK raises as its own classes.
import OpenAI from 'openai';
import { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { NO_RATE_LIMITS } from '../src/config.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestWorker, type Job } from './helpers/coordinator.js';
import { loggerInto } from './helpers/log-lines.js';
import { buildApp } from '../src/app.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { addApiKey } from '../src/nodes/api-keys.js';

const MODEL = 'llama3.2:latest';

/** Answers every job: "echo: <last message>", with usage (prompt = words in, completion = words out). */
function answering(worker: TestWorker): { stop: () => Promise<void> } {
  let running = true;
  const loop = (async () => {
    while (running) {
      const job = await worker.getJob(1);
      if (!job) continue;
      const last = job.messages.at(-1)!.content;
      const content = `echo: ${last}`;
      await worker.post('/worker/update_result', {
        job_id: job.job_id,
        api_key: job.api_key,
        model_name: job.model,
        status: 'success',
        result: { message: { role: 'assistant', content } },
        usage: {
          prompt_tokens: job.messages.map((m) => m.content.split(' ').length).reduce((a, b) => a + b, 0),
          completion_tokens: content.split(' ').length,
        },
      });
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
    },
  };
}

describe.each(backends)('OpenAI-compatible API on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let url: string;
  let userKey: string;
  let client: OpenAI;
  let worker: { stop: () => Promise<void> };

  beforeAll(async () => {
    t = await startApp(backend, { coordinator: { sweepInterval: 0.2 } });
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    userKey = await t.addUser('sdk');
    client = new OpenAI({ apiKey: userKey, baseURL: `${url}/v1`, maxRetries: 0 });
    const w = await new TestWorker(t.app, 'gpu-1', await t.addNode('gpu-1')).start([MODEL]);
    worker = answering(w);
    // A node that declares a model and never takes a job: its completions time out.
    await new TestWorker(t.app, 'idle-1', await t.addNode('idle-1')).start(['slow-model', 'org/slow:7b']);
  });
  afterAll(async () => {
    await worker.stop();
    await t.close();
  });

  it("answers chat.completions.create as chat.completion, with the node's usage", async () => {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'hello there' },
      ],
      max_tokens: 64,
      temperature: 0,
    });
    expect(r.id).toMatch(/^chatcmpl-/);
    expect(r.object).toBe('chat.completion');
    expect(r.model).toBe(MODEL);
    expect(r.choices).toEqual([
      { index: 0, message: { role: 'assistant', content: 'echo: hello there', refusal: null }, logprobs: null, finish_reason: 'stop' },
    ]);
    expect(r.usage).toEqual({ prompt_tokens: 4, completion_tokens: 3, total_tokens: 7 });
  });

  it('answers GET /v1/models/{model} for a name with a slash, escaped or not, as the SDK asks it', async () => {
    for (const path of ['/v1/models/org/slow:7b', '/v1/models/org%2Fslow%3A7b', '/models/org/slow:7b']) {
      const res = await fetch(`${url}${path}`);
      expect(res.status, path).toBe(200);
      expect(await res.json(), path).toMatchObject({ id: 'org/slow:7b', object: 'model' });
    }
    expect(await client.models.retrieve('org/slow:7b')).toMatchObject({ id: 'org/slow:7b' });
    const missing = await fetch(`${url}/v1/models/org/none`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: unknown }).error).toMatchObject({ code: 'model_not_found', param: 'model' });
  });

  it('streams role, content, finish and usage chunks, then [DONE]', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'stream me' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('echo: stream me');
    expect(chunks.filter((c) => c.choices[0]?.finish_reason).map((c) => c.choices[0]!.finish_reason)).toEqual(['stop']);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({ prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 });
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
  });

  it('streams without usage when not asked, and the raw stream ends with data: [DONE]', async () => {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${userKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'raw' }], stream: true }),
    });
    expect(res.headers.get('content-type')).toMatch(/text\/event-stream/);
    const text = await res.text();
    const events = text.split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(text).not.toContain('"usage"');
  });

  it('relays partial output as the node sends it (POST /worker/job_progress), then the rest', async () => {
    const w = await new TestWorker(t.app, 'streamer', await t.addNode('streamer')).start(['stream-model']);
    // The worker reports only once the client has read every piece: the pieces reached it before the answer did.
    let readAll!: () => void;
    const allRead = new Promise<void>((r) => (readAll = r));
    const worked = (async () => {
      const job = (await w.getJob(5))! as Job & { stream?: boolean };
      expect(job.stream).toBe(true);
      for (const delta of ['Once ', 'upon ', 'a ']) {
        expect((await w.post('/worker/job_progress', { job_id: job.job_id, api_key: job.api_key, delta })).statusCode).toBe(200);
      }
      await allRead;
      await w.post('/worker/update_result', {
        job_id: job.job_id,
        api_key: job.api_key,
        model_name: job.model,
        status: 'success',
        result: { message: { role: 'assistant', content: 'Once upon a time.' } },
      });
      // After the lease ended, progress is refused.
      expect((await w.post('/worker/job_progress', { job_id: job.job_id, api_key: job.api_key, delta: 'late' })).statusCode).toBe(400);
    })();
    const stream = await client.chat.completions.create({
      model: 'stream-model',
      messages: [{ role: 'user', content: 'tell a story' }],
      stream: true,
    });
    const pieces: string[] = [];
    for await (const c of stream) {
      if (c.choices[0]?.delta.content) pieces.push(c.choices[0].delta.content);
      if (pieces.join('') === 'Once upon a ') readAll();
    }
    await worked;
    expect(pieces).toEqual(['Once ', 'upon ', 'a ', 'time.']);
  });

  it('lists the models online nodes serve', async () => {
    const models = [];
    for await (const m of client.models.list()) models.push(m.id);
    expect(models).toEqual(expect.arrayContaining([MODEL, 'slow-model']));
    expect((await client.models.retrieve(MODEL)).id).toBe(MODEL);
  });

  it("raises the SDK's classes: NotFoundError for a model nobody serves, AuthenticationError for a bad key", async () => {
    const missing = await client.chat.completions
      .create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    expect(missing).toMatchObject({ status: 404, code: 'model_not_found', param: 'model' });
    const bad = new OpenAI({ apiKey: 'uk_not-a-key', baseURL: `${url}/v1`, maxRetries: 0 });
    const denied = await bad.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(denied).toMatchObject({ status: 401, code: 'invalid_api_key' });
  });

  it('refuses what it cannot run, naming the parameter: n > 1, tools, images', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ n: 2 }, 'n'],
      [{ tools: [{ type: 'function', function: { name: 'f', parameters: {} } }] }, 'tools'],
      [{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/a.png' } }] }] }, 'messages[0].content[0]'],
    ];
    for (const [extra, param] of cases) {
      const err = await client.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], ...extra } as never)
        .catch((e: unknown) => e);
      expect(err, param).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err).toMatchObject({ status: 400, type: 'invalid_request_error', param });
    }
  });

  it('refuses, as OpenAI does, fields whose form OpenAI refuses, though they change nothing here', async () => {
    const TOOL = { type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: {} } } };
    const CALL = {
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{}' } },
        { id: 'call_2', type: 'function', function: { name: 'weather', arguments: '{}' } },
      ],
    };
    const cases: [Record<string, unknown>, string, string | null][] = [
      [{ tools: [] }, 'tools', 'empty_array'],
      [{ tool_choice: 'auto' }, 'tool_choice', null],
      [{ tool_choice: 'none' }, 'tool_choice', null],
      [{ parallel_tool_calls: true }, 'parallel_tool_calls', null],
      [{ stream_options: { include_usage: true } }, 'stream_options', null],
      [{ stream: false, stream_options: { include_usage: true } }, 'stream_options', null],
      [{ user: 7 }, 'user', 'invalid_type'],
      [{ metadata: 'a' }, 'metadata', 'invalid_type'],
      [{ metadata: { a: 1 } }, 'metadata.a', 'invalid_type'],
      [{ metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata', 'object_above_max_properties'],
      [{ service_tier: 'fastest' }, 'service_tier', 'invalid_value'],
      [{ max_completion_tokens: 5, max_tokens: -1 }, 'max_tokens', 'invalid_value'],
      [{ messages: 'hi' }, 'messages', 'invalid_type'],
      [{ prompt_cache_key: 7 }, 'prompt_cache_key', 'invalid_type'],
      [{ safety_identifier: ['u'] }, 'safety_identifier', 'invalid_type'],
      [{ prompt_cache_retention: '1y' }, 'prompt_cache_retention', 'invalid_value'],
      [{ stream: true, stream_options: { include_obfuscation: 'no' } }, 'stream_options.include_obfuscation', 'invalid_type'],
      [{ messages: [{ role: 'user', content: 'x', name: 3 }] }, 'messages[0].name', 'invalid_type'],
      // A tool's answer to no call, and calls left unanswered (before the next message, or at the end).
      [
        {
          tools: [TOOL],
          messages: [
            { role: 'user', content: 'x' },
            { role: 'tool', tool_call_id: 'call_zz', content: 'sunny' },
          ],
        },
        'messages[1].role',
        null,
      ],
      [{ tools: [TOOL], messages: [{ role: 'user', content: 'x' }, CALL, { role: 'user', content: 'and?' }] }, 'messages[2].role', null],
      [
        {
          tools: [TOOL],
          messages: [
            { role: 'user', content: 'x' },
            CALL,
            { role: 'tool', tool_call_id: 'call_1', content: 'a' },
            { role: 'tool', tool_call_id: 'call_1', content: 'again' },
          ],
        },
        'messages[3].role',
        null,
      ],
      [{ tools: [TOOL], messages: [{ role: 'user', content: 'x' }, CALL] }, 'messages[1].role', null],
    ];
    for (const [extra, param, code] of cases) {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${userKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x' }], ...extra }),
      });
      expect(res.status, JSON.stringify(extra)).toBe(400);
      expect(((await res.json()) as { error: unknown }).error, JSON.stringify(extra)).toMatchObject({ type: 'invalid_request_error', param, code });
    }
    // Their valid forms are accepted and answered (tools with tool_choice: test/openai-fields.test.ts).
    const ok = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'fine', name: 'bob' }],
      user: 'u-1',
      metadata: { team: 'a' },
      service_tier: 'auto',
      max_completion_tokens: 5,
      max_tokens: 5,
      prompt_cache_key: 'k',
      safety_identifier: 'hashed-user',
      prompt_cache_retention: '24h',
    } as never);
    expect(ok.choices[0]!.message.content).toBe('echo: fine');
    const text = await client.completions
      .create({ model: MODEL, prompt: 'x', stream_options: { include_usage: true } } as never)
      .catch((e: unknown) => e);
    expect(text).toMatchObject({ status: 400, param: 'stream_options' });
    const vectors = await client.embeddings.create({ model: MODEL, input: 'x', user: 7 } as never).catch((e: unknown) => e);
    expect(vectors).toMatchObject({ status: 400, param: 'user', code: 'invalid_type' });
  });

  it('times out with 504 (InternalServerError) when no node finishes before the deadline, which the SDK does not retry (x-should-retry: false): one job', async () => {
    const retrying = new OpenAI({ apiKey: userKey, baseURL: `${url}/v1` });
    const err = await retrying.chat.completions
      .create({ model: 'slow-model', max_tokens: 11, messages: [{ role: 'user', content: 'x' }], request_timeout_time: 1 } as never)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect(err).toMatchObject({ status: 504, code: 'timeout' });
    expect((err as InstanceType<typeof OpenAI.InternalServerError>).headers.get('x-should-retry')).toBe('false');
    const jobs = await t.db.query<{ n: number }>(
      sql(
        'openai_timeout_jobs',
        "SELECT count(*)::int AS n FROM jobs j JOIN models m ON m.id = j.model_id WHERE m.name = 'slow-model' AND j.request ->> 'max_output' = '11'",
      ),
    );
    expect(jobs[0]!.n).toBe(1);
  });

  it('ends a stream whose job fails with the error as an event, then data: [DONE]; the SDK raises it', async () => {
    const body = JSON.stringify({ model: 'slow-model', messages: [{ role: 'user', content: 'x' }], stream: true, request_timeout_time: 1 });
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${userKey}`, 'content-type': 'application/json' },
      body,
    });
    expect(res.status).toBe(200);
    const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: '));
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(JSON.parse(events.at(-2)!.slice('data: '.length))).toMatchObject({ error: { code: 'timeout', param: null } });
    const stream = await client.chat.completions.create({
      model: 'slow-model',
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
      request_timeout_time: 1,
    } as never);
    const err = await (async () => {
      for await (const _ of stream as unknown as AsyncIterable<unknown>) {
        /* no chunk comes */
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
  });

  it("answers the seed system's clients on /chat/completions with the api_key header", async () => {
    const res = await fetch(`${url}/chat/completions`, {
      method: 'POST',
      headers: { api_key: userKey, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'seed' }],
        max_tokens: 8192,
        temperature: 0,
        request_timeout_time: 240,
      }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content).toBe('echo: seed');
  });

  it('answers a job canceled by its owner with 409 canceled that the SDK does not retry (x-should-retry: false): no second job', async () => {
    const retrying = new OpenAI({ apiKey: userKey, baseURL: `${url}/v1` });
    const jobsOf = async () =>
      await t.db.query<{ id: string; state: string }>(
        sql(
          'openai_cancel_jobs',
          "SELECT j.id::text, j.state FROM jobs j JOIN models m ON m.id = j.model_id WHERE m.name = 'slow-model' AND j.request ->> 'max_output' = '9' ORDER BY j.submitted_at",
        ),
      );
    const pending = retrying.chat.completions
      .create({ model: 'slow-model', max_tokens: 9, messages: [{ role: 'user', content: 'cancel me' }], request_timeout_time: 5 } as never)
      .catch((e: unknown) => e);
    await expect.poll(async () => (await jobsOf()).map((j) => j.state)).toEqual(['queued']);
    const [job] = await jobsOf();
    expect((await t.app.inject({ method: 'POST', url: `/cancel_job/${job!.id}`, headers: { api_key: userKey } })).statusCode).toBe(200);
    const err = await pending;
    expect(err).toBeInstanceOf(OpenAI.ConflictError);
    expect((err as InstanceType<typeof OpenAI.ConflictError>).headers.get('x-should-retry')).toBe('false');
    expect((err as InstanceType<typeof OpenAI.ConflictError>).code).toBe('canceled');
    expect((await jobsOf()).map((j) => j.state)).toEqual(['canceled']);
  });

  it('cancels the job of a client that hangs up before a node takes it', async () => {
    const gone = new AbortController();
    const lastJob = async () =>
      (
        await t.db.query<{ id: string; state: string }>(
          sql(
            'openai_last_job',
            "SELECT j.id::text, j.state FROM jobs j JOIN models m ON m.id = j.model_id WHERE m.name = 'slow-model' AND j.request ->> 'max_output' = '7' ORDER BY j.submitted_at DESC LIMIT 1",
          ),
        )
      )[0];
    const pending = fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      signal: gone.signal,
      headers: { authorization: `Bearer ${userKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'slow-model', max_tokens: 7, messages: [{ role: 'user', content: 'never mind' }] }),
    }).catch(() => undefined);
    await expect.poll(async () => (await lastJob())?.state).toBe('queued');
    gone.abort();
    await pending;
    await expect.poll(async () => (await lastJob())?.state, { timeout: 10_000 }).toBe('canceled');
  });

  it('cancels a leased job when its client hangs up: its node is refused at its next progress and report, and earns nothing', async () => {
    const w = await new TestWorker(t.app, 'abandoned-by-client', await t.addNode('abandoned-by-client')).start(['leased-model']);
    const gone = new AbortController();
    const pending = fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      signal: gone.signal,
      headers: { authorization: `Bearer ${userKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'leased-model', stream: true, messages: [{ role: 'user', content: 'start, then never mind' }] }),
    })
      .then((res) => res.text())
      .catch(() => undefined);
    const job = (await w.getJob(10))!;
    expect((await w.post('/worker/job_progress', { job_id: job.job_id, api_key: job.api_key, delta: 'Sta' })).statusCode).toBe(200);
    gone.abort();
    await pending;
    await expect
      .poll(async () => (await w.post('/worker/job_progress', { job_id: job.job_id, api_key: job.api_key, delta: '' })).statusCode, {
        timeout: 10_000,
      })
      .toBe(400);
    const late = await w.report(job);
    expect(late.statusCode).toBe(400);
    expect(late.json().detail).toMatch(/canceled/);
    expect(await t.db.query(sql('t_credit', 'SELECT count(*)::int AS n FROM job_results WHERE job_id = $1'), [job.job_id])).toEqual([{ n: 0 }]);
    expect(await t.app.metrics.registry.metrics()).toMatch(/ins_jobs_finished_total\{state="canceled"\} [1-9]/);
  });
});

describe('a client that hangs up', () => {
  it('is logged as a closed request (499), not as a failed job; streaming or not', async () => {
    const lines: { msg: string; level: number; status?: number }[] = [];
    const logger = loggerInto(lines);
    const db = await backends[0]!.open();
    const app = await buildApp({ db, logger, rateLimits: NO_RATE_LIMITS });
    try {
      const url = await app.listen({ port: 0, host: '127.0.0.1' });
      const w = await new TestWorker(app, 'walked-out-on', (await createNode(db, 'walked-out-on')).key).start(['hangup-model']);
      const userKey = (await addApiKey(db, 'user', 'app')).key;
      const gone = new AbortController();
      const pending = fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        signal: gone.signal,
        headers: { authorization: `Bearer ${userKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'hangup-model', messages: [{ role: 'user', content: 'never mind' }] }),
      }).catch(() => undefined);
      expect(await w.getJob(10)).toBeTruthy();
      gone.abort();
      await pending;
      // The error handler says how the request ended, either way: one line, at info.
      await expect
        .poll(() => lines.find((l) => l.msg === 'client closed request' || l.msg === 'openai api error'), { timeout: 10_000 })
        .toMatchObject({ msg: 'client closed request', level: 30, status: 499 });
      // Streaming: the same line, once the stream had begun (its role chunk read).
      const streamGone = new AbortController();
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        signal: streamGone.signal,
        headers: { authorization: `Bearer ${userKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'hangup-model', stream: true, messages: [{ role: 'user', content: 'never mind either' }] }),
      });
      const reader = res.body!.getReader();
      expect(new TextDecoder().decode((await reader.read()).value)).toContain('"role":"assistant"');
      expect(await w.getJob(10)).toBeTruthy();
      streamGone.abort();
      await expect.poll(() => lines.filter((l) => l.msg === 'client closed request').length, { timeout: 10_000 }).toBe(2);
      expect(lines.filter((l) => l.level >= 40).map((l) => l.msg)).toEqual([]);
    } finally {
      await app.close();
      await db.close();
    }
  });
});

describe('OpenAI-compatible API limits', () => {
  it('answers 429 with Retry-After past the per-user limits', async () => {
    const db = await backends[0]!.open();
    const app = await buildApp({ db, rateLimits: { ...NO_RATE_LIMITS, completionsPerUser: 2, concurrentPerUser: 1 } });
    try {
      const url = await app.listen({ port: 0, host: '127.0.0.1' });
      const { addApiKey } = await import('../src/nodes/api-keys.js');
      const key = (await addApiKey(db, 'user', 'limited')).key;
      const client = new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
      const create = () => client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
      // Nobody serves 'm' (404), but each call counts; the third in the minute is refused.
      expect(await create()).toBeInstanceOf(OpenAI.NotFoundError);
      expect(await create()).toBeInstanceOf(OpenAI.NotFoundError);
      const limited = await create();
      expect(limited).toBeInstanceOf(OpenAI.RateLimitError);
      expect((limited as InstanceType<typeof OpenAI.RateLimitError>).headers.get('retry-after')).toMatch(/^\d+$/);
    } finally {
      await app.close();
      await db.close();
    }
  });
});

describe.each(backends)('a completion waiting when its server stops, on $name', (backend) => {
  it('is answered 503 server_shutting_down, which the SDK retries, and its job is canceled: no node runs it for no one', async () => {
    const t = await startApp(backend);
    const client = new Client(await t.app.listen({ port: 0, host: '127.0.0.1' }));
    const userKey = await t.addUser('sdk');
    await new TestWorker(t.app, 'idle-node', await t.addNode('idle-node')).start(['slow-model']);
    const states = async () => (await t.db.query<{ state: string }>(sql('openai_shutdown_jobs', 'SELECT state FROM jobs'))).map((j) => j.state);
    const pending = client.request({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: `Bearer ${userKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'slow-model', messages: [{ role: 'user', content: 'wait for me' }] }),
    });
    await expect.poll(states).toEqual(['queued']);
    const closing = t.app.close();
    const res = await pending;
    expect(res.statusCode).toBe(503);
    expect(res.headers['x-should-retry']).toBeUndefined();
    expect(((await res.body.json()) as { error: unknown }).error).toMatchObject({ type: 'server_error', code: 'server_shutting_down' });
    // A completion that comes on the open connection while the server stops is answered so too, at once.
    const late = await client.request({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: `Bearer ${userKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'slow-model', messages: [{ role: 'user', content: 'too late' }] }),
    });
    expect(late.statusCode).toBe(503);
    expect(((await late.body.json()) as { error: unknown }).error).toMatchObject({ code: 'server_shutting_down' });
    // The client lets its connection go (a closing server keeps an answered one open for a last request: test/shutdown.test.ts).
    await client.close();
    await closing;
    expect(await states()).toEqual(['canceled', 'canceled']);
    await t.db.close();
  });
});
