// Property tests (fast-check) over every endpoint with hostile input: arbitrary JSON and raw
// bytes, wrong types, huge and tiny numbers, long and unicode strings, missing and extra
// fields, arbitrary query strings, headers, methods and paths. Invariants: never a 5xx, every
// body has the contract's shape, and a 4xx changes nothing. `npm test` runs a bounded number
// of cases from a fixed seed, so that a run is repeatable; `npm run fuzz` (FUZZ_RUNS) runs many
// more from a new seed each time (FUZZ_SEED=random; fast-check prints the seed of a failure,
// which FUZZ_SEED=<that seed> repeats).
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { DEFAULT_VERIFY } from '../src/config-verify.js';
import { auditBatch } from '../src/verify/auditor.js';
import { MAX_JSON_DEPTH } from '../src/validation/python-json.js';
import { isUnstorable } from '../src/validation/pydantic.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { snapshot } from './helpers/state.js';

const RUNS = Number(process.env.FUZZ_RUNS ?? 60);
const SEED = process.env.FUZZ_SEED === 'random' ? undefined : Number(process.env.FUZZ_SEED ?? 20261126);
const params = { numRuns: RUNS, ...(SEED !== undefined ? { seed: SEED } : {}) };

interface Reply {
  statusCode: number;
  body: string;
  headers: Record<string, unknown>;
}

// A generated value as the text of a header. String() throws for a JSON object with its own
// "toString" or "valueOf" key (fc.jsonValue makes those): such a value is sent as its JSON.
function headerText(v: unknown): string {
  try {
    return String(v);
  } catch {
    return JSON.stringify(v) ?? '';
  }
}

// The contract's error shapes: a string detail, or pydantic's list.
function checkShape(res: Reply, ok: (body: unknown) => void): void {
  expect(res.statusCode, res.body).toBeLessThan(500);
  const body = JSON.parse(res.body) as { detail?: unknown };
  if (res.statusCode < 400) return ok(body);
  if (res.statusCode === 422) {
    expect(Array.isArray(body.detail)).toBe(true);
    for (const e of body.detail as { loc: unknown; msg: unknown; type: unknown }[]) {
      expect(Array.isArray(e.loc)).toBe(true);
      expect((e.loc as unknown[]).every((l) => typeof l === 'string' || Number.isInteger(l))).toBe(true);
      expect(typeof e.msg).toBe('string');
      expect(typeof e.type).toBe('string');
    }
  } else {
    expect(typeof body.detail).toBe('string');
  }
}

// Values that stress a JSON API: huge/tiny numbers, long and odd unicode strings, nesting.
const nasty = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.double(),
  fc.constantFrom(1e308, -1e308, 5e-324, -0, 2 ** 53 + 1, Number.MAX_SAFE_INTEGER, 367, 366, 0, -1),
  fc.string({ unit: 'binary', maxLength: 300 }),
  fc.string({ maxLength: 3000 }),
  fc.constantFrom('', ' ', '\u0000', '\ud800', '😀', 'null', '7', '7.0', ' 7 ', 'success', 'error', '2024-01-01', 'x'.repeat(129)),
);
const field = <T>(good: fc.Arbitrary<T>) => fc.oneof({ weight: 3, arbitrary: good }, { weight: 2, arbitrary: nasty });
// Text PostgreSQL cannot store: a NUL or a lone surrogate somewhere in it.
const unstorable = fc
  .tuple(fc.string({ maxLength: 10 }), fc.constantFrom('\u0000', '\ud800', '\udfff', 'a\u0000b', '\udc00\ud800'), fc.string({ maxLength: 10 }))
  .map(([a, b, c]) => a + b + c);
// JSON text nested `depth` levels (arrays and objects at random) around a leaf, around the limit
// (MAX_JSON_DEPTH) and far beyond it, well-formed or cut short; built as text, as no JS value that
// deep survives JSON.stringify.
const deepJson = fc
  .record({
    depth: fc.oneof(fc.integer({ min: MAX_JSON_DEPTH - 3, max: MAX_JSON_DEPTH + 3 }), fc.integer({ min: 1, max: 6_000 })),
    kinds: fc.array(fc.boolean(), { minLength: 1, maxLength: 8 }),
    leaf: fc.oneof(
      fc.constantFrom('1', '"x"', '"\\u0000"', 'null', '{}', '[]'),
      unstorable.map((u) => JSON.stringify(u)),
    ),
    cut: fc.option(fc.nat(), { nil: undefined }),
  })
  .map(({ depth, kinds, leaf, cut }) => {
    let open = '';
    let close = '';
    for (let i = 0; i < depth; i++) {
      const object = kinds[i % kinds.length]!;
      open += object ? '{"a":' : '[';
      close = (object ? '}' : ']') + close;
    }
    const text = open + leaf + close;
    return cut === undefined ? text : text.slice(0, cut % text.length);
  });

describe.each(backends)('fuzz on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let nodeKey: string;
  let readerKey: string;
  let userKey: string;
  let sessionToken: string;
  let jobId: string;
  beforeAll(async () => {
    // No sweeps during the run: a snapshot must only change by the request under test.
    t = await startApp(backend, { bodyLimit: 64 * 1024, coordinator: { sweepInterval: 3600 } });
    nodeKey = await t.addNode('fuzz-node');
    readerKey = await t.addReader();
    userKey = await t.addUser();
    const reg = await t.app.inject({
      method: 'POST',
      url: '/worker/register_node',
      headers: { authorization: `Bearer ${nodeKey}` },
      payload: { node_url: 'fuzz-node' },
    });
    sessionToken = (reg.json() as { access_token: string }).access_token;
    await t.app.inject({
      method: 'POST',
      url: '/worker/update_models',
      headers: { authorization: `Bearer ${sessionToken}` },
      payload: { models: ['fuzz-model'] },
    });
    jobId = (
      await t.app.inject({
        method: 'POST',
        url: '/submit_job',
        headers: { api_key: userKey },
        payload: { model: 'other-model', messages: [{ role: 'user', content: 'x' }] },
      })
    ).json<{ job_id: string }>().job_id;
  });
  afterAll(async () => t.close());

  // A rejected request must leave everything as it was.
  async function unchangedUnless2xx(send: () => Promise<Reply>, ok: (body: unknown) => void): Promise<void> {
    const before = await snapshot(t.db);
    const res = await send();
    checkShape(res, ok);
    if (res.statusCode >= 400) expect(await snapshot(t.db)).toEqual(before);
  }

  const keyArb = () => fc.oneof(fc.constant(nodeKey), fc.constant(readerKey), fc.constant(`${nodeKey}x`), nasty);
  const contentType = fc.constantFrom(
    undefined,
    'application/json',
    'application/json; charset=utf-8',
    'text/plain',
    'application/x-www-form-urlencoded',
    'application/vnd.api+json',
    'multipart/form-data; boundary=x',
  );
  const rawBody = (obj: fc.Arbitrary<unknown>) =>
    fc.oneof(
      { weight: 4, arbitrary: obj.map((o) => JSON.stringify(o) ?? '') },
      { weight: 1, arbitrary: fc.string({ maxLength: 200 }) },
      { weight: 1, arbitrary: fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)) },
      { weight: 1, arbitrary: obj.map((o) => (JSON.stringify(o) ?? '').slice(0, -1)) },
    );

  it('POST /worker/update_result never fails the server and never half-records', async () => {
    const report = fc.record(
      {
        job_id: field(fc.string({ minLength: 1, maxLength: 12 })),
        api_key: keyArb(),
        model_name: field(fc.constantFrom('llama3.2:latest', 'mistral')),
        result: field(fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue({ maxDepth: 2 }))),
        status: field(fc.constantFrom('success', 'error')),
        extra: nasty,
      },
      { requiredKeys: [] },
    );
    await fc.assert(
      fc.asyncProperty(rawBody(fc.oneof({ weight: 5, arbitrary: report }, { weight: 1, arbitrary: nasty })), contentType, async (payload, type) => {
        await unchangedUnless2xx(
          () => t.app.inject({ method: 'POST', url: '/worker/update_result', payload, headers: type ? { 'content-type': type } : {} }),
          (body) =>
            expect(body).toEqual({
              job_id: expect.any(String),
              status: expect.stringMatching(/^(success|error)$/),
              points: expect.any(Number),
              replayed: expect.any(Boolean),
            }),
        );
      }),
      params,
    );
  });

  it('bodies nested deep, well-formed or not, never fail the server (400 past MAX_JSON_DEPTH) and change nothing when refused', async () => {
    // The model no node serves: a /v1 request that passes answers 404 at once instead of waiting for a node.
    const where = fc.constantFrom('result', 'extra', 'body');
    await fc.assert(
      fc.asyncProperty(
        deepJson,
        where,
        fc.constantFrom('/worker/update_result', '/submit_job', '/daily_points', '/v1/chat/completions'),
        async (deep, at, url) => {
          const payload =
            at === 'body'
              ? deep
              : `{"job_id": "deep-${Math.random().toString(36).slice(2)}", "api_key": "${nodeKey}", "model_name": "m", "status": "success", "model": "unserved-model", "messages": [{"role": "user", "content": "x"}], "${at}": ${deep}}`;
          const headers = { 'content-type': 'application/json', api_key: url === '/daily_points' ? readerKey : userKey };
          const before = await snapshot(t.db);
          const res = await t.app.inject({ method: 'POST', url, payload, headers });
          expect(res.statusCode, res.body.slice(0, 300)).toBeLessThan(500);
          if (res.statusCode >= 400) expect(await snapshot(t.db)).toEqual(before);
          const body = JSON.parse(res.body) as { detail?: unknown; error?: unknown };
          if (res.statusCode === 400 && url !== '/v1/chat/completions') expect(body).toEqual({ detail: 'There was an error parsing the body' });
          if (url === '/v1/chat/completions' && res.statusCode >= 400) expect(body.error).toBeDefined();
        },
      ),
      params,
    );
  });

  it('text PostgreSQL cannot store, anywhere in a /v1 request for a served model, is a 400 that changes nothing', async () => {
    const text = fc.oneof(fc.string({ maxLength: 10 }), unstorable);
    const content = fc.oneof(text, fc.array(fc.record({ type: fc.constant('text'), text }), { minLength: 1, maxLength: 3 }));
    const message = fc.record({ role: fc.constantFrom('user', 'system', 'assistant', 'developer'), content });
    const request = fc
      .record({
        model: fc.oneof({ weight: 4, arbitrary: fc.constant('fuzz-model') }, { weight: 1, arbitrary: unstorable }),
        messages: fc.array(message, { minLength: 1, maxLength: 3 }),
      })
      .filter((r) =>
        [r.model, ...r.messages.flatMap((m) => (typeof m.content === 'string' ? [m.content] : m.content.map((p) => p.text)))].some(isUnstorable),
      );
    await fc.assert(
      fc.asyncProperty(request, fc.constantFrom('/v1/chat/completions', '/chat/completions'), fc.boolean(), async (r, url, bearer) => {
        const before = await snapshot(t.db);
        // A request that got through would wait for a node: a second at most, then 504 (still a failure here).
        const res = await t.app.inject({
          method: 'POST',
          url,
          payload: { ...r, request_timeout_time: 1 },
          headers: bearer ? { authorization: `Bearer ${userKey}` } : { api_key: userKey },
        });
        expect(res.statusCode, res.body).toBe(400);
        expect(res.json()).toMatchObject({ error: { type: 'invalid_request_error', code: 'invalid_value' } });
        expect(await snapshot(t.db)).toEqual(before);
      }),
      params,
    );
  });

  it('job-key reports with any token counts never fail the server, keep only counts an int holds, and every job stays auditable', async () => {
    const count = fc.oneof(
      fc.integer({ min: 0, max: 2 ** 31 - 1 }),
      fc.constantFrom(-1, 2 ** 31 - 1, 2 ** 31, 3e9, 2 ** 53 + 1, 1e300, 0.5, '12', null),
      nasty,
    );
    const usage = fc.option(fc.record({ prompt_tokens: count, completion_tokens: count }, { requiredKeys: [] }), { nil: undefined });
    const auth = { authorization: `Bearer ${sessionToken}` };
    await fc.assert(
      fc.asyncProperty(usage, usage, async (u, inResult) => {
        await t.app.inject({
          method: 'POST',
          url: '/submit_job',
          headers: { api_key: userKey },
          payload: { model: 'fuzz-model', messages: [{ role: 'user', content: 'count' }] },
        });
        await t.app.inject({ method: 'POST', url: '/worker/update_models', headers: auth, payload: { models: ['fuzz-model'] } });
        const job = (await t.app.inject({ method: 'GET', url: '/worker/get_job?node_version=1', headers: auth })).json<{
          job_data: { job_id: string; api_key: string; model: string } | null;
        }>().job_data;
        expect(job).not.toBeNull();
        const payload = {
          job_id: job!.job_id,
          api_key: job!.api_key,
          model_name: job!.model,
          status: 'success',
          result: { message: 'counted', ...(inResult ? { usage: inResult } : {}) },
          ...(u ? { usage: u } : {}),
        };
        await unchangedUnless2xx(
          () => t.app.inject({ method: 'POST', url: '/worker/update_result', payload }),
          () => undefined,
        );
        const [kept] = await t.db.query<{ usage: Record<string, unknown> | null }>(sql('fuzz_usage', 'SELECT usage FROM jobs WHERE id = $1::uuid'), [
          job!.job_id,
        ]);
        // The counts an int holds; `estimated` marks counts the service estimated where none was kept (jobs/answer.ts).
        const { estimated, ...counts } = kept?.usage ?? {};
        expect(estimated === undefined || estimated === true, String(estimated)).toBe(true);
        for (const v of Object.values(counts))
          expect(Number.isInteger(v) && (v as number) >= 0 && (v as number) <= 2 ** 31 - 1, String(v)).toBe(true);
      }),
      params,
    );
    // Whatever was kept, the audit takes every done job and sets none aside.
    await t.db.query(
      sql(
        'fuzz_queue_audits',
        "INSERT INTO job_audits (job_id, finished_at) SELECT id, finished_at FROM jobs WHERE state = 'done' ON CONFLICT DO NOTHING",
      ),
    );
    const opts = {
      verify: { ...DEFAULT_VERIFY, share: 0, probeInterval: 0 },
      onlineWindow: 60,
      modelsTtl: 21_600,
      jobTimeout: 240,
      checks: t.app.service.coordinator.lifecycle,
    };
    for (let report = await auditBatch(t.db, opts); report; report = await auditBatch(t.db, opts)) expect(report.setAside).toEqual([]);
  });

  it('POST /daily_points never fails the server', async () => {
    const request = fc.record(
      { node_name: field(fc.constantFrom('fuzz-node', 'nobody')), last_days: field(fc.integer({ min: -5, max: 400 })), extra: nasty },
      { requiredKeys: [] },
    );
    const header = fc.option(fc.oneof(keyArb().map(headerText), fc.string({ maxLength: 50 })), { nil: undefined });
    await fc.assert(
      fc.asyncProperty(rawBody(request), contentType, header, async (payload, type, key) => {
        const headers: Record<string, string> = {};
        if (type) headers['content-type'] = type;
        // Header values must be printable; others cannot even be sent.
        if (key !== undefined && /^[\x20-\x7e]*$/.test(key)) headers.api_key = key;
        await unchangedUnless2xx(
          () => t.app.inject({ method: 'POST', url: '/daily_points', payload, headers }),
          (body) => {
            expect(Array.isArray(body)).toBe(true);
            for (const d of body as { date: unknown; points: unknown }[]) {
              expect(d.date).toMatch(/^\d{4}-\d{2}-\d{2}$/);
              expect(typeof d.points).toBe('number');
            }
          },
        );
      }),
      params,
    );
  });

  it('GET /unique_nodes never fails the server, whatever the query string', async () => {
    const value = fc.oneof(
      fc.string({ maxLength: 40 }),
      fc.string({ unit: 'binary', maxLength: 40 }),
      fc.constantFrom(
        '2024-01-01',
        '2024-01-01T10:00:00+14:00',
        '9999-12-31T23:59:59-01:00',
        '0001-01-01',
        '-1',
        '99999999999999999999',
        '1e300',
        'null',
        '',
      ),
    );
    const query = fc.oneof(
      fc.dictionary(fc.constantFrom('model_name', 'start_date', 'end_date', 'other'), fc.array(value, { minLength: 1, maxLength: 2 })).map((d) =>
        Object.entries(d)
          .flatMap(([k, vs]) => vs.map((v) => `${k}=${encodeURIComponent(v)}`))
          .join('&'),
      ),
      fc.string({ maxLength: 80 }).map((s) => s.replace(/[#\s]/g, '')),
    );
    await fc.assert(
      fc.asyncProperty(query, async (q) => {
        const res = await t.app.inject({ method: 'GET', url: `/unique_nodes?${q}` });
        checkShape(res, (body) =>
          expect(body).toEqual({
            model_name: expect.any(String),
            start_date: expect.toSatisfy((v) => v === null || typeof v === 'string'),
            end_date: expect.toSatisfy((v) => v === null || typeof v === 'string'),
            count: expect.any(Number),
            nodes: expect.any(Array),
          }),
        );
      }),
      params,
    );
  });

  it('the coordinator endpoints never fail the server, and a rejected call changes nothing', async () => {
    const credential = fc.oneof(
      fc.constant(nodeKey),
      fc.constant(readerKey),
      fc.constant(userKey),
      fc.constant(sessionToken),
      fc.constant('jk_nothing'),
      fc.string({ maxLength: 30 }),
    );
    const headerOf = fc.record({
      api_key: fc.option(credential, { nil: undefined }),
      authorization: fc.option(
        fc.oneof(
          credential.map((c) => `Bearer ${c}`),
          fc.string({ maxLength: 30 }),
        ),
        { nil: undefined },
      ),
    });
    const message = fc.record({ role: field(fc.constantFrom('user', 'system')), content: field(fc.string({ maxLength: 20 })) }, { requiredKeys: [] });
    const bodies: Record<string, fc.Arbitrary<unknown>> = {
      '/check_node_secret': fc.record({ node_id: field(fc.constantFrom('fuzz-node', 'nobody')), secret: credential }, { requiredKeys: [] }),
      '/worker/register_node': fc.record(
        {
          node_url: field(fc.constantFrom('fuzz-node', 'nobody')),
          node_version: nasty,
          stats: field(fc.object()),
          secret: credential,
          capacity: field(fc.integer({ min: -1, max: 70 })),
        },
        { requiredKeys: [] },
      ),
      '/worker/update_models': fc.record(
        {
          node_url: field(fc.constantFrom('fuzz-node', 'nobody')),
          models: field(fc.array(fc.constantFrom('fuzz-model', 'm2', ''), { maxLength: 3 })),
        },
        { requiredKeys: [] },
      ),
      '/worker/deregister_node': fc.record({ node_url: nasty }, { requiredKeys: [] }),
      '/submit_job': fc.record(
        {
          model: field(fc.constantFrom('fuzz-model', 'other-model')),
          messages: field(fc.array(message, { maxLength: 3 })),
          max_output: field(fc.integer({ min: -2, max: 10 })),
          temperature: field(fc.double({ min: -1, max: 3, noNaN: true })),
          request_timeout_time: field(fc.integer({ min: -1, max: 100_000 })),
        },
        { requiredKeys: [] },
      ),
      '/worker/update_result': fc.record(
        {
          job_id: field(fc.constantFrom(jobId, 'x')),
          api_key: credential,
          model_name: field(fc.constantFrom('fuzz-model', 'other-model')),
          result: field(fc.object()),
          status: field(fc.constantFrom('success', 'error')),
          usage: nasty,
        },
        { requiredKeys: [] },
      ),
      // `ins worker`'s wire (issue 56): reports and leases in one call, and progress by the piece.
      // `wait` never a real wait here (a valid session would hold the call that long).
      '/worker/jobs/next': fc.record(
        {
          reports: field(
            fc.array(
              fc.record(
                {
                  job_id: field(fc.constantFrom(jobId, 'x')),
                  api_key: credential,
                  model_name: field(fc.constantFrom('fuzz-model', 'other-model')),
                  result: field(fc.object()),
                  status: field(fc.constantFrom('success', 'error')),
                },
                { requiredKeys: [] },
              ),
              { maxLength: 3 },
            ),
          ),
          max_jobs: field(fc.integer({ min: -1, max: 70 })),
          wait: fc.constantFrom(0, -1, 31, 0.001, 'x', null),
        },
        { requiredKeys: [] },
      ),
      '/worker/job_progress': fc.record(
        { job_id: field(fc.constantFrom(jobId, 'x')), api_key: credential, delta: field(fc.string({ maxLength: 20 })) },
        { requiredKeys: [] },
      ),
    };
    const gets = fc.oneof(
      fc.constantFrom(
        '/worker/get_job',
        '/worker/ping',
        '/available_models',
        '/active_node_count',
        '/total_job_count',
        `/get_result/${jobId}`,
        '/get_result/x',
        `/get_completion_time/${jobId}`,
        '/get_points',
      ),
      fc
        .tuple(
          fc.constantFrom('/worker/get_job?wait=', '/get_points?node_name=', `/get_result/${jobId}?wait=`),
          fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('0', '0.01', '31', '-1', 'fuzz-node', 'nobody')),
        )
        .map(([p, v]) => `${p}${encodeURIComponent(v)}`),
    );
    const call = fc.oneof(
      fc
        .record({ method: fc.constant('POST' as const), url: fc.constantFrom(...Object.keys(bodies)) })
        .chain((c) => rawBody(bodies[c.url]!).map((payload) => ({ ...c, payload }))),
      gets.map((url) => ({ method: 'GET' as const, url, payload: undefined })),
    );
    await fc.assert(
      fc.asyncProperty(call, headerOf, async (c, h) => {
        const headers: Record<string, string> = { 'content-type': 'application/json' };
        for (const [k, v] of Object.entries(h)) if (v !== undefined && /^[\x20-\x7e]*$/.test(v)) headers[k] = v;
        await unchangedUnless2xx(
          () => t.app.inject({ method: c.method, url: c.url, payload: c.payload, headers }),
          (body) => expect(typeof body).toBe('object'),
        );
      }),
      params,
    );
  });

  it('POST /worker/job_progress_stream never fails the server, whatever its lines: each answer line is JSON with a status', async () => {
    // A job of its own, leased, so that first lines with its key are taken and the later lines read.
    const key = await t.addNode('fuzz-stream-node');
    const auth = {
      authorization: `Bearer ${(await t.app.inject({ method: 'POST', url: '/worker/register_node', headers: { authorization: `Bearer ${key}` }, payload: { node_url: 'fuzz-stream-node' } })).json<{ access_token: string }>().access_token}`,
    };
    await t.app.inject({ method: 'POST', url: '/worker/update_models', headers: auth, payload: { models: ['fuzz-stream-model'] } });
    const streamed = (
      await t.app.inject({
        method: 'POST',
        url: '/submit_job',
        headers: { api_key: userKey },
        payload: { model: 'fuzz-stream-model', messages: [{ role: 'user', content: 'x' }] },
      })
    ).json<{ job_id: string }>().job_id;
    const leased = (await t.app.inject({ method: 'GET', url: '/worker/get_job?node_version=1', headers: auth })).json<{
      job_data: { job_id: string; api_key: string };
    }>().job_data;
    expect(leased.job_id).toBe(streamed);
    const line = fc.oneof(
      fc.record({ delta: field(fc.string({ maxLength: 20 })) }, { requiredKeys: [] }).map((o) => JSON.stringify(o)),
      fc.string({ maxLength: 40 }),
      nasty.map((v) => JSON.stringify(v) ?? ''),
    );
    const first = fc.oneof(
      fc
        .record(
          {
            job_id: field(fc.constantFrom(streamed, streamed, jobId)),
            api_key: fc.constantFrom(leased.api_key, leased.api_key, 'jk_nothing', nodeKey),
            delta: field(fc.string({ maxLength: 20 })),
          },
          { requiredKeys: [] },
        )
        .map((o) => JSON.stringify(o)),
      fc.string({ maxLength: 40 }),
    );
    let taken = 0;
    await fc.assert(
      fc.asyncProperty(
        first,
        fc.array(line, { maxLength: 4 }),
        fc.constantFrom('application/x-ndjson', 'application/json', 'text/plain'),
        async (head, rest, type) => {
          const before = await snapshot(t.db);
          const res = await t.app.inject({
            method: 'POST',
            url: '/worker/job_progress_stream',
            payload: [head, ...rest].join('\n'),
            headers: { 'content-type': type },
          });
          expect(res.statusCode, res.body).toBeLessThan(500);
          if (res.statusCode >= 400) {
            expect(JSON.parse(res.body)).toHaveProperty('detail');
            expect(await snapshot(t.db)).toEqual(before);
            return;
          }
          taken++;
          for (const l of res.body.split('\n').filter(Boolean))
            expect(['success', 'ended', 'error']).toContain((JSON.parse(l) as { status: string }).status);
        },
      ),
      params,
    );
    // The lease's own key was taken in some cases: the later lines were read, not only refused at the first.
    expect(taken).toBeGreaterThan(0);
  });

  it("the OpenAI-compatible API never fails the server, answers errors in OpenAI's shape, and changes nothing when it refuses", async () => {
    // No node serves these models: every call is answered without waiting for one.
    const part = fc.oneof(
      fc.record({ type: fc.constant('text'), text: fc.string({ maxLength: 10 }) }),
      fc.record({ type: fc.constantFrom('image_url', 'input_audio'), image_url: fc.object() }),
      nasty,
    );
    const message = fc.record(
      {
        role: field(fc.constantFrom('user', 'system', 'assistant', 'tool', 'developer')),
        content: fc.oneof(field(fc.string({ maxLength: 20 })), fc.array(part, { maxLength: 2 })),
      },
      { requiredKeys: [] },
    );
    const body = fc.record(
      {
        model: field(fc.constantFrom('unknown-model', 'other-model')),
        messages: field(fc.array(message, { maxLength: 3 })),
        max_tokens: field(fc.integer({ min: -2, max: 10 })),
        temperature: field(fc.double({ min: -1, max: 3, noNaN: true })),
        n: field(fc.integer({ min: 0, max: 3 })),
        stream: field(fc.boolean()),
        stream_options: nasty,
        tools: field(fc.array(fc.object(), { maxLength: 1 })),
        request_timeout_time: nasty,
        extra: nasty,
      },
      { requiredKeys: [] },
    );
    const auth = fc.oneof(fc.constant(`Bearer ${userKey}`), fc.constant(`Bearer ${nodeKey}`), fc.string({ maxLength: 20 }));
    await fc.assert(
      fc.asyncProperty(rawBody(body), auth, fc.constantFrom('/v1/chat/completions', '/chat/completions'), async (payload, authorization, url) => {
        const headers: Record<string, string> = { 'content-type': 'application/json' };
        if (/^[\x20-\x7e]*$/.test(authorization)) headers.authorization = authorization;
        const before = await snapshot(t.db);
        const res = await t.app.inject({ method: 'POST', url, payload, headers });
        expect(res.statusCode, res.body).toBeGreaterThanOrEqual(400);
        expect(res.statusCode, res.body).toBeLessThan(500);
        const err = (JSON.parse(res.body) as { error: { message: unknown; type: unknown } }).error;
        expect(typeof err.message).toBe('string');
        expect(typeof err.type).toBe('string');
        expect(await snapshot(t.db)).toEqual(before);
      }),
      params,
    );
  });

  it("the Messages and Responses front doors never fail the server, answer errors in their wire's shape, and change nothing when they refuse", async () => {
    // No node serves these models: every call is answered without waiting for one, after the body is read.
    const block = fc.oneof(
      fc.record({ type: fc.constant('text'), text: field(fc.string({ maxLength: 10 })) }, { requiredKeys: ['type'] }),
      fc.record({ type: fc.constant('tool_use'), id: nasty, name: nasty, input: nasty }, { requiredKeys: ['type'] }),
      fc.record({ type: fc.constant('tool_result'), tool_use_id: nasty, content: nasty, is_error: nasty }, { requiredKeys: ['type'] }),
      fc.record(
        { type: fc.constantFrom('image', 'thinking', 'document', 'input_text', 'output_text', 'input_image'), text: nasty },
        { requiredKeys: ['type'] },
      ),
      nasty,
    );
    const turn = fc.record(
      {
        role: field(fc.constantFrom('user', 'assistant', 'system', 'developer', 'tool')),
        content: fc.oneof(field(fc.string({ maxLength: 20 })), fc.array(block, { maxLength: 3 })),
      },
      { requiredKeys: [] },
    );
    const item = fc.oneof(
      turn,
      fc.record(
        {
          type: fc.constantFrom('message', 'function_call', 'function_call_output', 'reasoning', 'item_reference', 'custom_tool_call'),
          role: nasty,
          content: nasty,
          call_id: nasty,
          name: nasty,
          arguments: nasty,
          output: nasty,
        },
        { requiredKeys: ['type'] },
      ),
      nasty,
    );
    const tool = fc.record(
      {
        type: field(fc.constantFrom('function', 'custom', 'web_search', 'namespace', 'file_search', 'web_search_20250305')),
        name: nasty,
        input_schema: nasty,
        parameters: nasty,
        strict: nasty,
      },
      { requiredKeys: [] },
    );
    const bodies: Record<string, fc.Arbitrary<unknown>> = {
      '/v1/messages': fc.record(
        {
          model: field(fc.constantFrom('unknown-model', 'other-model')),
          max_tokens: field(fc.integer({ min: -2, max: 10 })),
          messages: field(fc.array(turn, { maxLength: 3 })),
          system: fc.oneof(nasty, fc.array(block, { maxLength: 2 })),
          tools: field(fc.array(tool, { maxLength: 2 })),
          tool_choice: fc.oneof(nasty, fc.record({ type: fc.constantFrom('auto', 'any', 'tool', 'none', 'x'), name: nasty })),
          stop_sequences: nasty,
          temperature: nasty,
          top_p: nasty,
          top_k: nasty,
          stream: nasty,
          metadata: nasty,
          thinking: nasty,
        },
        { requiredKeys: [] },
      ),
      '/v1/messages/count_tokens': fc.record(
        { model: field(fc.constantFrom('unknown-model')), messages: field(fc.array(turn, { maxLength: 3 })), system: nasty, tools: nasty },
        { requiredKeys: [] },
      ),
      '/v1/responses': fc.record(
        {
          model: field(fc.constantFrom('unknown-model', 'other-model')),
          input: fc.oneof(nasty, fc.array(item, { maxLength: 3 })),
          instructions: nasty,
          tools: field(fc.array(tool, { maxLength: 2 })),
          tool_choice: nasty,
          text: fc.oneof(
            nasty,
            fc.record({
              format: fc.oneof(
                nasty,
                fc.record({ type: fc.constantFrom('text', 'json_object', 'json_schema', 'x'), name: nasty, schema: nasty, strict: nasty }),
              ),
            }),
          ),
          max_output_tokens: nasty,
          previous_response_id: fc.oneof(nasty, fc.constant('resp_00000000000000000000000000000000')),
          store: nasty,
          background: nasty,
          include: nasty,
          reasoning: nasty,
          metadata: nasty,
          stream: nasty,
        },
        { requiredKeys: [] },
      ),
    };
    const auth = fc.oneof(
      fc.constant({ 'x-api-key': userKey }),
      fc.constant({ authorization: `Bearer ${userKey}` }),
      fc.constant({ 'x-api-key': nodeKey }),
      fc.record({ authorization: fc.string({ maxLength: 20 }) }),
    );
    const call = fc.constantFrom(...Object.keys(bodies)).chain((url) => rawBody(bodies[url]!).map((payload) => ({ url, payload })));
    await fc.assert(
      fc.asyncProperty(call, auth, async ({ url, payload }, a) => {
        const headers: Record<string, string> = { 'content-type': 'application/json' };
        for (const [k, v] of Object.entries(a)) if (/^[\x20-\x7e]*$/.test(v)) headers[k] = v;
        const before = await snapshot(t.db);
        const res = await t.app.inject({ method: 'POST', url, payload, headers });
        expect(res.statusCode, res.body).toBeLessThan(500);
        if (res.statusCode >= 400) {
          const body = JSON.parse(res.body) as { type?: unknown; error: { message: unknown; type: unknown } };
          if (url.startsWith('/v1/messages')) expect(body.type).toBe('error');
          expect(typeof body.error.message).toBe('string');
          expect(typeof body.error.type).toBe('string');
        }
        expect(await snapshot(t.db)).toEqual(before);
      }),
      params,
    );
  });

  it('any method on any path answers with a detail, never a 5xx', async () => {
    const method = fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'HEAD');
    const path = fc.oneof(
      fc.constantFrom('/worker/update_result', '/daily_points', '/unique_nodes', '/healthz', '/readyz', '/docs', '/openapi.json', '/metrics'),
      fc.webPath(),
      fc.string({ maxLength: 30 }).map((s) => `/${encodeURIComponent(s)}`),
    );
    await fc.assert(
      fc.asyncProperty(method, path, async (m, p) => {
        // A request line always has a path starting with /.
        const url = p.startsWith('/') ? p : `/${p}`;
        const res = await t.app.inject({ method: m as 'GET', url });
        expect(res.statusCode, `${m} ${url}`).toBeLessThan(500);
        if (res.statusCode >= 400 && m !== 'HEAD') expect(typeof JSON.parse(res.body).detail).not.toBe('undefined');
      }),
      params,
    );
  });
});
