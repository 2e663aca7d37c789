// The HTTP conventions every client meets (issue 28): an unknown /v1 path answers OpenAI's error
// object (the SDK shows its message), every response carries x-request-id (the client's own when
// plain, the same id in the log line), and /v1 speaks CORS to browsers with a working preflight
// while the rest of the service sends no CORS headers. Through a listening server, with the
// official SDK and fetch as a browser would send.
import { once } from 'node:events';
import { connect } from 'node:net';
import OpenAI, { NotFoundError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import type { Database } from '../src/db/database.js';
import { loadConfig } from '../src/config.js';
import { addApiKey } from '../src/nodes/api-keys.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { backends } from './helpers/db.js';
import { TestWorker } from './helpers/coordinator.js';
import { loggerInto } from './helpers/log-lines.js';

const MODEL = 'llama3.2:latest';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe.each(backends)('HTTP conventions on $name', (backend) => {
  let db: Database;
  let app: Awaited<ReturnType<typeof buildApp>>;
  let url: string;
  let userKey: string;
  const lines: { reqId?: string; msg?: string; route?: string; status?: number }[] = [];

  beforeAll(async () => {
    db = await backend.open();
    const logger = loggerInto(lines);
    app = await buildApp({ db, logger, verify: { enabled: false } });
    url = await app.listen({ port: 0, host: '127.0.0.1' });
    userKey = (await addApiKey(db, 'user', 'browser')).key;
  });
  afterAll(async () => {
    await app.close();
    await db.close();
  });

  it("answers any unknown /v1 path, any method, with OpenAI's 404 error object once the key is checked (401 without one); other paths keep FastAPI's", async () => {
    for (const [method, path] of [
      ['GET', '/v1/responses'],
      ['GET', '/v1/messages'],
      ['GET', '/v1/batches'],
      ['DELETE', '/v1/files/f-1'],
      ['PUT', '/v1/models'],
      ['GET', '/v1/chat/completions'],
      ['GET', '/v1'],
      ['PATCH', '/v1/a/b/c'],
    ] as const) {
      const res = await app.inject({ method, url: `${path}?x=1`, headers: { authorization: `Bearer ${userKey}` } });
      expect(res.statusCode, `${method} ${path}`).toBe(404);
      expect(res.json()).toEqual({ error: { message: `Invalid URL (${method} ${path})`, type: 'invalid_request_error', param: null, code: null } });
      // No key, or a made-up one: the key is refused before the path is looked at.
      for (const headers of [{}, { authorization: 'Bearer uk_made_up' }, { 'x-api-key': 'uk_made_up' }]) {
        const refused = await app.inject({ method, url: path, headers });
        expect(refused.statusCode, `${method} ${path} ${JSON.stringify(headers)}`).toBe(401);
        expect(refused.json().error.type).toBe('invalid_request_error');
      }
    }
    for (const path of ['/v1x', '/v2/responses', '/nope']) {
      const res = await app.inject({ method: 'POST', url: path });
      expect(res.statusCode).toBe(404);
      expect(res.json()).toEqual({ detail: 'Not Found' });
    }
  });

  it('logs a client that hangs up mid-body as that, not as the database unavailable', async () => {
    const { hostname, port } = new URL(url);
    const socket = connect(Number(port), hostname);
    await once(socket, 'connect');
    // `Expect: 100-continue`: the server's 100 says it is handling the request and waits for the body.
    socket.write(
      'POST /worker/update_result HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n',
    );
    const [first] = (await once(socket, 'data')) as [Buffer];
    expect(String(first)).toMatch(/^HTTP\/1\.1 100 Continue/);
    socket.write('{"job_id": "');
    socket.destroy();
    await expect.poll(() => lines.some((l) => l.msg === 'the client closed the connection before its body arrived')).toBe(true);
    expect(lines.filter((l) => l.msg === 'service unavailable')).toEqual([]);
  });

  it('the official SDK raises NotFoundError with that message', async () => {
    const client = new OpenAI({ apiKey: userKey, baseURL: `${url}/v1`, maxRetries: 0 });
    const err = await client.post('/batches', { body: { input_file_id: 'f', endpoint: '/v1/chat/completions' } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as NotFoundError).message).toBe('404 Invalid URL (POST /v1/batches)');
  });

  it("puts x-request-id on every response: the client's own when plain, else a fresh one; the log line has the same id", async () => {
    const own = await fetch(`${url}/healthz`, { headers: { 'x-request-id': 'trace-01HZX:abc/def+=' } });
    expect(own.headers.get('x-request-id')).toBe('trace-01HZX:abc/def+=');
    for (const bad of ['a'.repeat(129), 'has space', 'quote"d', 'ünïcode']) {
      const res = await app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': bad } });
      expect(res.headers['x-request-id']).toMatch(UUID);
    }
    const ids = new Set<string>();
    for (const [method, path] of [
      ['GET', '/nope'],
      ['POST', '/v1/chat/completions'],
      ['POST', '/worker/update_result'],
      ['GET', '/v1/models'],
      ['PUT', '/daily_points'],
    ] as const) {
      const res = await app.inject({ method, url: path, payload: method === 'GET' ? undefined : {} });
      const id = res.headers['x-request-id'] as string;
      expect(id, `${method} ${path} (${res.statusCode})`).toMatch(UUID);
      ids.add(id);
    }
    expect(ids.size).toBe(5);
    const res = await app.inject({ method: 'POST', url: '/worker/update_result', payload: {}, headers: { 'x-request-id': 'find-me-42' } });
    expect(res.statusCode).toBe(422);
    expect(lines.filter((l) => l.msg === 'request' && l.reqId === 'find-me-42')).toEqual([
      expect.objectContaining({ route: '/worker/update_result', status: 422 }),
    ]);
  });

  it("answers a browser's preflight for /v1 and lets the page read the answer, streamed too", async () => {
    const origin = 'https://app.example.com';
    const pre = await fetch(`${url}/v1/chat/completions`, {
      method: 'OPTIONS',
      headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type,x-stainless-os' },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get('access-control-allow-origin')).toBe('*');
    expect(pre.headers.get('access-control-allow-methods')).toMatch(/POST/);
    expect(pre.headers.get('access-control-allow-headers')).toBe('authorization,content-type,x-stainless-os');
    expect(pre.headers.get('x-request-id')).toMatch(UUID);
    // Counted as what it is, not among the stray 404s.
    await expect
      .poll(async () => app.metrics.registry.metrics())
      .toMatch(/http_requests_total\{method="OPTIONS",route="\/v1 \(CORS preflight\)",status="204"\} 1/);

    const worker = await new TestWorker(app, 'gpu-1', (await createNode(db, 'gpu-1')).key).start([MODEL]);
    const answered = (async () => {
      const job = (await worker.getJob(30))!;
      expect((await worker.report(job, 'hello browser')).statusCode).toBe(200);
    })();
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { origin, authorization: `Bearer ${userKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
    expect(res.headers.get('access-control-expose-headers')).toMatch(/x-request-id/);
    expect(res.headers.get('x-request-id')).toMatch(UUID);
    expect(await res.text()).toContain('[DONE]');
    await answered;

    // A 404 of /v1 is readable by the page too; the worker wire and the rest send no CORS headers.
    const missing = await fetch(`${url}/v1/responses`, { method: 'POST', headers: { origin } });
    expect(missing.headers.get('access-control-allow-origin')).toBe('*');
    for (const path of ['/worker/update_result', '/unique_nodes?model_name=x', '/healthz']) {
      const res = await fetch(`${url}${path}`, { headers: { origin } });
      expect(res.headers.get('access-control-allow-origin'), path).toBeNull();
      // Nor Vary: Origin, which the worker wire never had (their answers do not depend on it).
      expect(res.headers.get('vary'), path).toBeNull();
    }
    const otherPre = await fetch(`${url}/worker/update_result`, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST' } });
    expect(otherPre.status).toBe(405);
    expect(otherPre.headers.get('access-control-allow-origin')).toBeNull();
  });
});

describe('CORS_ORIGINS', () => {
  it('is *, off, or a list of origins; anything else stops the server with what to write', () => {
    expect(loadConfig({}).corsOrigins).toBe('*');
    expect(loadConfig({ CORS_ORIGINS: 'off' }).corsOrigins).toBe(false);
    expect(loadConfig({ CORS_ORIGINS: 'https://a.example, http://localhost:3000' }).corsOrigins).toEqual([
      'https://a.example',
      'http://localhost:3000',
    ]);
    for (const bad of ['a.example', 'https://a.example/path', 'ftp://a.example', ',']) {
      expect(() => loadConfig({ CORS_ORIGINS: bad }), bad).toThrow(/CORS_ORIGINS: .* is not an origin/);
    }
  });

  it.each(backends)('answers only the listed origins on $name, and no preflight at all when off', async (backend) => {
    const db = await backend.open();
    for (const corsOrigins of [['https://a.example'], false] as const) {
      const app = await buildApp({ db, corsOrigins: corsOrigins === false ? false : [...corsOrigins], verify: { enabled: false } });
      const pre = (origin: string) =>
        app.inject({ method: 'OPTIONS', url: '/v1/models', headers: { origin, 'access-control-request-method': 'GET' } });
      if (corsOrigins === false) {
        const res = await pre('https://a.example');
        expect(res.statusCode).toBe(404);
        expect(res.headers['access-control-allow-origin']).toBeUndefined();
        expect(res.json().error.message).toBe('Invalid URL (OPTIONS /v1/models)');
      } else {
        expect((await pre('https://a.example')).headers['access-control-allow-origin']).toBe('https://a.example');
        expect((await pre('https://evil.example')).headers['access-control-allow-origin']).toBeUndefined();
      }
      await app.close();
    }
    await db.close();
  });
});
