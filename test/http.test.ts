// What every endpoint shares: unknown paths and methods, the served contract and docs,
// health, metrics, and failures of the database (503) or of the code (500, nothing leaked).
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import type { Database } from '../src/db/database.js';
import { openPostgres } from '../src/db/pg.js';
import { OPENAPI_FILE } from '../src/routes/operations.js';
import { backends } from './helpers/db.js';
import { report, startApp } from './helpers/app.js';

describe.each(backends)('HTTP basics on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  beforeAll(async () => {
    t = await startApp(backend);
  });
  afterAll(async () => t.close());

  it('404 Not Found for an unknown path', async () => {
    for (const url of [
      '/nope',
      '/worker',
      '/unique_nodes/extra',
      '/app.js.map',
      '/data/',
      '/get_result/abc/extra',
      '/ledger/days/x/y',
      '/get_result/',
      '/get_completion_time/',
      '/network/nodes/',
      '/ledger/days//nodes/n1',
    ]) {
      const res = await t.app.inject({ method: 'GET', url });
      expect(res.statusCode).toBe(404);
      expect(res.json()).toEqual({ detail: 'Not Found' });
    }
  });

  it('307 to the path without its trailing slash when a route serves that path, query kept, as FastAPI redirects', async () => {
    const cases: [string, string, string][] = [
      ['GET', '/unique_nodes/?model_name=m1', '/unique_nodes?model_name=m1'],
      ['POST', '/worker/update_result/', '/worker/update_result'],
      ['POST', '/daily_points//', '/daily_points'],
      ['GET', '/get_result/abc/', '/get_result/abc'],
      // A route with a parameter under a route: the empty parameter is no path, the parent is.
      ['GET', '/ledger/days/?last_days=3', '/ledger/days?last_days=3'],
      // The path is served, for another method: the redirect still comes first (the method's 405 follows it).
      ['GET', '/worker/update_result/', '/worker/update_result'],
    ];
    for (const [method, url, to] of cases) {
      const res = await t.app.inject({ method: method as 'GET', url, headers: { host: 'svc.example:8000' } });
      expect(res.statusCode, `${method} ${url}`).toBe(307);
      expect(res.headers.location).toBe(to);
    }
    for (const url of ['/nope/', '/worker/', '/unique_nodes/extra/']) expect((await t.app.inject({ method: 'GET', url })).statusCode, url).toBe(404);
  });

  it('reads a body under a Content-Type that is no media type as text, as FastAPI does: 422, not 415', async () => {
    // An empty Content-Type is none at all: JSON, as FastAPI reads a body without one.
    for (const type of ['', '   ']) {
      const res = await t.app.inject({ method: 'POST', url: '/worker/update_result', headers: { 'content-type': type }, payload: '{"a":1}' });
      expect(res.statusCode, JSON.stringify(type)).toBe(422);
      expect(
        res.json().detail.map((d: { type: string }) => d.type),
        JSON.stringify(type),
      ).toContain('missing');
    }
    for (const type of ['garbage', 'application', '/json', 'a b/c']) {
      const res = await t.app.inject({ method: 'POST', url: '/worker/update_result', headers: { 'content-type': type }, payload: '{"a":1}' });
      expect(res.statusCode, type).toBe(422);
      expect(res.json().detail, type).toEqual([
        {
          type: 'model_attributes_type',
          loc: ['body'],
          msg: 'Input should be a valid dictionary or object to extract fields from',
          input: '{"a":1}',
        },
      ]);
    }
  });

  it('answers malformed JSON with 422 json_invalid before looking at the key, as FastAPI decodes the body before its dependencies', async () => {
    for (const url of ['/daily_points', '/submit_job']) {
      for (const headers of [{}, { api_key: 'bogus' }]) {
        const res = await t.app.inject({
          method: 'POST',
          url,
          headers: { 'content-type': 'application/json', ...headers },
          payload: '{"node_name":',
        });
        expect(res.statusCode, `${url} ${JSON.stringify(headers)}`).toBe(422);
        expect(res.json().detail[0]).toMatchObject({ type: 'json_invalid', loc: ['body', 13], msg: 'JSON decode error' });
      }
      // Well-formed JSON with wrong fields still asks for the key first.
      expect((await t.app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: '{}' })).statusCode, url).toBe(401);
    }
  });

  it('reads the query string as Starlette does: a %-escape that is not UTF-8 is U+FFFD, a malformed one stays, + is a space', async () => {
    const cases: [string, string][] = [
      ['%ff%fe', '\ufffd\ufffd'],
      ['%e9t%C3%A9', '\ufffdt\u00e9'],
      ['%ED%A0%80', '\ufffd\ufffd\ufffd'],
      ['a%zzb', 'a%zzb'],
      ['a+b%2Bc', 'a b+c'],
      ['x&model_name=last', 'last'],
    ];
    for (const [raw, name] of cases) {
      const res = await t.app.inject({ method: 'GET', url: `/unique_nodes?model_name=${raw}` });
      expect(res.statusCode, raw).toBe(200);
      expect(res.json().model_name, raw).toBe(name);
    }
    expect((await t.app.inject({ method: 'GET', url: '/unique_nodes?__proto__=x&model_name=m' })).json().model_name).toBe('m');
  });

  it('405 Method Not Allowed with Allow for a known path', async () => {
    const cases: [string, string, string][] = [
      ['GET', '/worker/update_result', 'POST'],
      ['PUT', '/daily_points', 'POST'],
      ['POST', '/unique_nodes?model_name=x', 'GET, HEAD'],
      ['DELETE', '/healthz', 'GET, HEAD'],
      // Paths with a parameter: the route serves the path, not the method.
      ['POST', '/get_result/abc', 'GET, HEAD'],
      ['DELETE', '/get_completion_time/abc?x=1', 'GET, HEAD'],
      ['GET', '/cancel_job/abc', 'POST'],
      ['POST', '/ledger/days/2026-01-01', 'GET, HEAD'],
      ['PUT', '/ledger/days/2026-01-01/nodes/n1', 'GET, HEAD'],
      ['POST', '/network/nodes/n%20x', 'GET, HEAD'],
    ];
    for (const [method, url, allow] of cases) {
      const res = await t.app.inject({ method: method as 'GET', url });
      expect(res.statusCode, `${method} ${url}`).toBe(405);
      expect(res.json()).toEqual({ detail: 'Method Not Allowed' });
      expect(res.headers.allow).toBe(allow);
    }
  });

  it("404 with detail for a malformed %-escape or an overlong path parameter, OpenAI's 404 under /v1", async () => {
    for (const url of ['/%zz', '/get_result/%zz', `/get_result/${'a'.repeat(2_000)}`, `/network/nodes/${'a'.repeat(1_100)}`]) {
      const res = await t.app.inject({ method: 'GET', url });
      expect(res.statusCode, url.slice(0, 40)).toBe(404);
      expect(res.json(), url.slice(0, 40)).toEqual({ detail: 'Not Found' });
    }
    for (const url of ['/v1/models/%zz', `/v1/models/${'m'.repeat(2_000)}`]) {
      const res = await t.app.inject({ method: 'GET', url });
      expect(res.statusCode).toBe(404);
      expect(res.json().error).toMatchObject({ type: 'invalid_request_error' });
    }
    // A model's name of 256 characters is a name, not an overlong parameter: the route answers.
    const long = await t.app.inject({ method: 'GET', url: `/v1/models/${'m'.repeat(256)}` });
    expect(long.statusCode).toBe(404);
    expect(long.json().error).toMatchObject({ code: 'model_not_found' });
  });

  it('serves openapi.json byte for byte, and the interactive docs from local assets', async () => {
    const spec = await t.app.inject({ method: 'GET', url: '/openapi.json' });
    expect(spec.statusCode).toBe(200);
    expect(spec.headers['content-type']).toMatch(/application\/json/);
    expect(spec.body).toBe(readFileSync(OPENAPI_FILE, 'utf8'));
    const docs = await t.app.inject({ method: 'GET', url: '/docs' });
    const html = docs.statusCode === 302 ? (await t.app.inject({ method: 'GET', url: docs.headers.location as string })).body : docs.body;
    expect(html).toContain('swagger-ui');
    expect(html).not.toMatch(/https?:\/\/(cdn|unpkg|cdnjs)/);
    const asset = await t.app.inject({ method: 'GET', url: '/docs/static/swagger-ui-bundle.js' });
    expect(asset.statusCode).toBe(200);
  });

  it('serves the dashboard at / from the built assets, with no external resources', async () => {
    const page = await t.app.inject({ method: 'GET', url: '/' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/text\/html/);
    expect(page.body).not.toMatch(/(src|href)="(https?:)?\/\//);
    for (const asset of ['/app.js', '/app.css']) expect((await t.app.inject({ method: 'GET', url: asset })).statusCode).toBe(200);
  });

  it('answers liveness and readiness', async () => {
    expect((await t.app.inject({ method: 'GET', url: '/healthz' })).json()).toEqual({ status: 'ok' });
    expect((await t.app.inject({ method: 'GET', url: '/readyz' })).json()).toEqual({ status: 'ok' });
  });

  it('exports Prometheus metrics for requests, results and points', async () => {
    const key = await t.addNode('metered');
    await t.app.inject({ method: 'POST', url: '/worker/update_result', payload: report(key) });
    await t.app.inject({ method: 'POST', url: '/worker/update_result', payload: report(key, { status: 'error' }) });
    const res = await t.app.inject({ method: 'GET', url: '/metrics' });
    expect(res.headers['content-type']).toMatch(/text\/plain/);
    expect(res.body).toMatch(/http_requests_total\{method="POST",route="\/worker\/update_result",status="200"\} 2/);
    expect(res.body).toMatch(/http_request_duration_seconds_bucket\{le="0.005",method="POST",route="\/worker\/update_result",status="200"\}/);
    expect(res.body).toMatch(/ins_results_total\{status="success",outcome="recorded"\} 1/);
    expect(res.body).toMatch(/ins_results_total\{status="error",outcome="recorded"\} 1/);
    expect(res.body).toMatch(/ins_points_credited_total 1/);
    expect(res.body).toMatch(/ins_db_pool_connections\{state="total"\}/);
    // Each statement's latency, by the statement's name.
    expect(res.body).toMatch(/ins_db_statement_duration_seconds_count\{statement="results_credit"\} [1-9]/);
  });
});

describe('when the database is away', () => {
  let app: Awaited<ReturnType<typeof buildApp>>;
  let db: Database;
  beforeAll(async () => {
    // A real pg pool pointed at a port where nothing listens.
    db = openPostgres({ connectionString: 'postgresql://postgres@127.0.0.1:9/none', connectionTimeoutMillis: 1000 });
    app = await buildApp({ db });
  });
  afterAll(async () => {
    await app.close();
    await db.close();
  });

  it('503 with a detail, quickly, on every endpoint and on readiness', async () => {
    const requests = [
      { method: 'POST' as const, url: '/worker/update_result', payload: report('nk_x') },
      { method: 'POST' as const, url: '/daily_points', payload: { node_name: 'a', last_days: 1 }, headers: { api_key: 'nk_x' } },
      { method: 'GET' as const, url: '/unique_nodes?model_name=m' },
      { method: 'GET' as const, url: '/readyz' },
    ];
    for (const r of requests) {
      const res = await app.inject(r);
      expect(res.statusCode, r.url).toBe(503);
      expect(typeof res.json().detail).toBe('string');
    }
    expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
  });
});

describe('when the embedded database has been closed', () => {
  it('503, not 500', async () => {
    const db = await backends[0]!.open();
    const app = await buildApp({ db });
    await db.close();
    try {
      const res = await app.inject({ method: 'GET', url: '/unique_nodes?model_name=m' });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toEqual({ detail: 'Database unavailable, retry later' });
    } finally {
      await app.close();
    }
  });
});

describe('an unexpected failure', () => {
  it('is a 500 that says nothing about its cause', async () => {
    const real = await backends[0]!.open();
    // The real database with one fault injected: a query error that is not the client's doing.
    const broken: Database = {
      ...real,
      query: async () => {
        throw new Error('relation "secret_table" does not exist at /srv/app');
      },
    };
    const app = await buildApp({ db: broken });
    try {
      const res = await app.inject({ method: 'GET', url: '/unique_nodes?model_name=m' });
      expect(res.statusCode).toBe(500);
      expect(res.json()).toEqual({ detail: 'Internal Server Error' });
    } finally {
      await app.close();
      await real.close();
    }
  });
});
