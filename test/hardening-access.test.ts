// Issue 20's attacks on access, performed against the real app on each backend: the keyless
// register_node window, daily_points for keys that are not the node's, long polls without
// end, rate limits keyed on a header authentication does not read, metrics series per made-up
// model. (Reports, submissions and audits: test/hardening.test.ts.)
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { Writable } from 'node:stream';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { connect, type Socket } from 'node:net';
import type { IncomingMessage } from 'node:http';
import { once } from 'node:events';
import { buildApp } from '../src/app.js';
import { NO_RATE_LIMITS, type RateLimits } from '../src/config.js';
import type { Database } from '../src/db/database.js';
import { openPglite } from '../src/db/pglite.js';
import { sql } from '../src/db/database.js';
import { createNode, rotateNodeKey } from '../src/nodes/lifecycle.js';
import { addApiKey } from '../src/nodes/api-keys.js';
import { backends } from './helpers/db.js';
import { startApp, type TestApp } from './helpers/app.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';
import { until } from './helpers/wait.js';

describe.each(backends)('finding 6 on $name: a check_node_secret opens register_node once, for the key it proved', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  const ADDRESS = '10.1.0.1';
  const check = (secret: string, remoteAddress = ADDRESS) =>
    t.app.inject({ method: 'POST', url: '/check_node_secret', remoteAddress, payload: { node_id: 'gpu', secret } });
  const register = (remoteAddress = ADDRESS, over: { headers?: Record<string, string>; secret?: string } = {}) =>
    t.app.inject({
      method: 'POST',
      url: '/worker/register_node',
      remoteAddress,
      headers: over.headers ?? {},
      payload: { node_url: 'gpu', node_version: '1', stats: {}, ...(over.secret !== undefined ? { secret: over.secret } : {}) },
    });

  it('serves one registration per check; a wrong key inside the window gets nothing', async () => {
    t = await startApp(backend);
    const key = await t.addNode('gpu');
    // The real worker's start, twice from one address: each registration after its own check.
    await new TestWorker(t.app, 'gpu', key, ADDRESS).start(['m']);
    await new TestWorker(t.app, 'gpu', key, ADDRESS).start(['m']);
    expect((await check(key)).statusCode).toBe(200);
    expect((await register()).statusCode).toBe(200);
    expect((await register()).statusCode).toBe(401);
    // Inside a window, a wrong key in any of the three places is refused, and the check stays for its worker.
    expect((await check(key)).statusCode).toBe(200);
    expect((await register(ADDRESS, { secret: 'nk_wrong' })).statusCode).toBe(401);
    const wrong = await register(ADDRESS, { headers: { authorization: 'Bearer nk_wrong' } });
    expect(wrong.statusCode).toBe(401);
    // It says the key is not this node's, not that a key is missing (the worker did send one).
    expect(wrong.json().detail).toMatch(/^The key sent is not node "gpu"'s key/);
    expect((await register()).statusCode).toBe(200);
    expect((await check(key)).statusCode).toBe(200);
    expect((await register(ADDRESS, { headers: { api_key: 'wrong' } })).statusCode).toBe(401);
    expect((await register()).statusCode).toBe(200);
  });

  it('counts each check: two workers behind one address that each check, then each register, both get a session', async () => {
    t = await startApp(backend);
    const key = await t.addNode('gpu');
    expect((await check(key)).statusCode).toBe(200);
    expect((await check(key)).statusCode).toBe(200);
    expect((await register()).statusCode).toBe(200);
    expect((await register()).statusCode).toBe(200);
    expect((await register()).statusCode).toBe(401);
    // Concurrent pairs, as a fleet restarting: as many sessions as checks, no more.
    await Promise.all(Array.from({ length: 5 }, () => check(key)));
    const replies = await Promise.all(Array.from({ length: 7 }, () => register()));
    expect(replies.map((r) => r.statusCode).sort()).toEqual([200, 200, 200, 200, 200, 401, 401]);
    // Another address's checks are its own.
    expect((await check(key, '10.1.0.2')).statusCode).toBe(200);
    expect((await register()).statusCode).toBe(401);
    expect((await register('10.1.0.2')).statusCode).toBe(200);
    // A spent check leaves no row behind (a worker on a changing address would leave one a day).
    expect(await t.db.query(sql('t_spent_checks', 'SELECT client_addr FROM node_secret_checks'))).toEqual([]);
  });

  it('gives one session to concurrent keyless registrations after one check', async () => {
    t = await startApp(backend);
    const key = await t.addNode('gpu');
    expect((await check(key)).statusCode).toBe(200);
    const replies = await Promise.all(Array.from({ length: 6 }, () => register()));
    expect(replies.map((r) => r.statusCode).sort()).toEqual([200, 401, 401, 401, 401, 401]);
  });

  describe("a registration whose answer never reaches its worker gives its check back, so the worker's retry is served", () => {
    const body = JSON.stringify({ node_url: 'gpu', node_version: '1', stats: {} });
    const sessions = () => t.db.query<{ ended: boolean }>(sql('t_sessions', 'SELECT ended_at IS NOT NULL AS ended FROM node_sessions ORDER BY id'));
    /** A request read whole by the server (its 'end'): its handler runs, and waits on the database. */
    const readWhole = () => once(t.app.server, 'request').then(([req]) => once(req as IncomingMessage, 'end'));

    /**
     * The worker gives up waiting (the real one's timeout) while the database holds its
     * registration, which commits after the connection is gone: its token reaches no one. With
     * `retryMeanwhile`, the retry comes while the first still waits.
     */
    const abandoned = async (retryMeanwhile: boolean) => {
      t = await startApp(backend);
      const key = await t.addNode('gpu');
      const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
      const post = (path: string, payload: string) =>
        fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: payload });
      expect((await post('/check_node_secret', JSON.stringify({ node_id: 'gpu', secret: key }))).status).toBe(200);
      let retry: Promise<Response> | undefined;
      await t.db.transaction(async (tx) => {
        await tx.query(sql('t_hold_check', 'SELECT uses FROM node_secret_checks FOR UPDATE'));
        const socket = connect(Number(new URL(url).port), '127.0.0.1');
        const arrived = readWhole();
        socket.write(
          `POST /worker/register_node HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        );
        const [serverSide] = await Promise.all([once(t.app.server, 'connection'), arrived]);
        const gone = once(serverSide[0] as Socket, 'close');
        socket.destroy();
        await gone;
        if (retryMeanwhile) {
          const second = readWhole();
          retry = post('/worker/register_node', body);
          await second;
        }
      });
      return { post, retry };
    };

    it('a retry after the first was given back', async () => {
      const { post } = await abandoned(false);
      // That session was opened and ended, and the check is the worker's again.
      await vi.waitFor(async () => expect(await sessions()).toEqual([{ ended: true }]), { timeout: 10_000, interval: 20 });
      expect((await post('/worker/register_node', body)).status).toBe(200);
      expect(await sessions()).toEqual([{ ended: true }, { ended: false }]);
      // A delivered answer spends the check for good.
      expect((await post('/worker/register_node', body)).status).toBe(401);
    });

    it('a retry sent while the first still waited on the database', async () => {
      // It found the check spent by the first (a row lock, then the row gone) and waits for the
      // first to give it back, rather than answering the 401 that stops the worker for hours.
      const { post, retry } = await abandoned(true);
      expect((await retry!).status).toBe(200);
      expect((await sessions()).filter((s) => !s.ended)).toEqual([{ ended: false }]);
      expect(await t.db.query(sql('t_left_uses', 'SELECT uses FROM node_secret_checks WHERE uses > 0'))).toEqual([]);
      expect((await post('/worker/register_node', body)).status).toBe(401);
    });
  });

  it('voids a check when the key is rotated', async () => {
    t = await startApp(backend);
    const old = await t.addNode('gpu');
    expect((await check(old)).statusCode).toBe(200);
    const fresh = (await rotateNodeKey(t.db, 'gpu'))!.key;
    // Before: a token bound to the new key, obtained with the old one, that never expired.
    expect((await register()).statusCode).toBe(401);
    expect((await check(old)).statusCode).toBe(401);
    expect((await check(fresh)).statusCode).toBe(200);
    const reg = await register();
    expect(reg.statusCode).toBe(200);
    const token = reg.json<{ access_token: string }>().access_token;
    const poll = await t.app.inject({ method: 'GET', url: '/worker/get_job?node_version=1', headers: { authorization: `Bearer ${token}` } });
    expect(poll.statusCode).toBe(200);
  });
});

describe.each(backends)('finding 7 on $name: daily_points reads a node for that node or a reader only', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  it("refuses user keys and other nodes' sessions, whether the node exists or not, on the seed's wire", async () => {
    t = await startApp(backend);
    const keyA = await t.addNode('node-a');
    const keyB = await t.addNode('node-b');
    const reader = await t.addReader();
    const user = await t.addUser();
    const sessionA = (await new TestWorker(t.app, 'node-a', keyA).start(['m'])).token;
    const sessionB = (await new TestWorker(t.app, 'node-b', keyB).start(['m'])).token;
    const ask = (node: string, headers: Record<string, string>) =>
      t.app.inject({ method: 'POST', url: '/daily_points', headers, payload: { node_name: node, last_days: 3 } });
    const status = async (node: string, headers: Record<string, string>) => (await ask(node, headers)).statusCode;

    // The attack: a user key, or another node's session token, read node B's days or probed names.
    expect(await status('node-b', { api_key: user })).toBe(403);
    expect(await status('no-such-node', { api_key: user })).toBe(403);
    expect(await status('node-b', { api_key: sessionA })).toBe(403);
    expect(await status('no-such-node', { api_key: sessionA })).toBe(403);
    expect((await ask('node-b', { api_key: user })).json()).toEqual({ detail: "This key cannot read nodes' data" });
    // As the contract has it: the node's own key (or its session), a reader key.
    expect(await status('node-b', { api_key: keyB })).toBe(200);
    expect(await status('node-b', { api_key: sessionB })).toBe(200);
    expect((await ask('node-b', { api_key: reader })).json()).toHaveLength(3);
    expect(await status('node-b', { api_key: keyA })).toBe(403);
    expect(await status('no-such-node', { api_key: keyA })).toBe(403);
    expect((await ask('no-such-node', { api_key: reader })).json()).toEqual({ detail: 'Node not found' });
    expect((await ask('no-such-node', { api_key: reader })).statusCode).toBe(404);
    expect((await ask('node-b', {})).json()).toEqual({ detail: 'Not authenticated' });
    // The key travels in the api_key header only, as the seed's dashboards send it.
    expect((await ask('node-b', { authorization: `Bearer ${reader}` })).json()).toEqual({ detail: 'Not authenticated' });
  });
});

describe.each(backends)('low findings on $name: limits keyed on who calls, long polls capped, bounded metrics', (backend) => {
  let db: Database | undefined;
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.close();
    await db?.close();
    app = undefined;
    db = undefined;
  });
  const start = async (limits: Partial<RateLimits>) => {
    db = await backend.open();
    app = await buildApp({ db, rateLimits: { ...NO_RATE_LIMITS, ...limits }, verify: { enabled: false } });
    return { app, db };
  };
  const completion = (a: TestApp, headers: Record<string, string>, model = 'nobody-serves-this') =>
    a.inject({ method: 'POST', url: '/v1/chat/completions', headers, payload: { model, messages: [{ role: 'user', content: 'hi' }] } });

  it('counts completions per user key however the key is sent', async () => {
    const { app, db } = await start({ completionsPerUser: 5 });
    const user = (await addApiKey(db, 'user', 'app')).key;
    const other = (await addApiKey(db, 'user', 'other')).key;
    // The attack: the key in api_key, a different Authorization header each time (620 answers, no 429).
    for (let i = 0; i < 3; i++) expect((await completion(app, { api_key: user, authorization: `Bearer junk-${i}` })).statusCode).toBe(404);
    for (let i = 0; i < 2; i++) expect((await completion(app, { authorization: `Bearer ${user}` })).statusCode).toBe(404);
    const limited = await completion(app, { api_key: user, authorization: 'Bearer junk-last' });
    expect(limited.statusCode).toBe(429);
    expect(limited.json()).toMatchObject({ error: { code: 'rate_limit_exceeded' } });
    expect((await completion(app, { authorization: `Bearer ${other}` })).statusCode).toBe(404);
  });

  it('labels completions of made-up models "other" in /metrics: one series however many names', async () => {
    const { app, db } = await start({});
    const user = (await addApiKey(db, 'user', 'app')).key;
    for (let i = 0; i < 40; i++) expect((await completion(app, { authorization: `Bearer ${user}` }, `made-up-${i}`)).statusCode).toBe(404);
    const series = (await app.metrics.registry.metrics()).split('\n').filter((l) => l.startsWith('ins_completions_total{'));
    expect(series).toEqual(['ins_completions_total{model="other",outcome="model_not_found"} 40']);
  });

  it('caps the long polls of one key: past the cap, get_result answers at once, as with wait=0', async () => {
    const { app, db } = await start({ longPollsPerKey: 3 });
    const user = new TestUser(app, (await addApiKey(db, 'user', 'app')).key);
    const worker = await new TestWorker(app, 'gpu', (await createNode(db, 'gpu')).key).start(['m']);
    const jobId = await user.submit('m');
    // The attack was thousands of these from one key; four make the point with a cap of 3.
    const polls = Array.from({ length: 4 }, () => user.result(jobId, 30));
    const first = await Promise.race(polls);
    expect(first.statusCode).toBe(404);
    expect(first.json()).toMatchObject({ detail: 'Job not finished', state: 'queued' });
    // The three others were waiting: the job's end answers them.
    expect((await worker.report((await worker.getJob())!)).statusCode).toBe(200);
    const all = await Promise.all(polls);
    expect(all.map((r) => r.statusCode).sort()).toEqual([200, 200, 200, 404]);
  });

  it('caps the long polls of one address and of one session: past a cap, get_job answers null at once', async () => {
    const { app, db } = await start({ longPollsPerIp: 2, longPollsPerKey: 1 });
    const user = new TestUser(app, (await addApiKey(db, 'user', 'app')).key);
    const workers = [];
    for (const name of ['a', 'b', 'c']) workers.push(await new TestWorker(app, name, (await createNode(db, name)).key, '10.2.0.1').start(['m']));
    const settledFlags = (polls: Promise<unknown>[]) => {
      const flags = polls.map(() => false);
      polls.forEach(
        (p, i) =>
          void p.then(() => {
            flags[i] = true;
          }),
      );
      return flags;
    };
    // Three sessions at one address, a cap of two.
    const polls = workers.map((w) => w.getJobRaw(30));
    const answered = settledFlags(polls);
    const first = await Promise.race(polls);
    expect(first.statusCode).toBe(200);
    expect(first.json()).toEqual({ job_data: null });
    expect(answered.filter(Boolean)).toHaveLength(1);
    // The two waiting polls get the next two jobs.
    await user.submit('m', 'one');
    await user.submit('m', 'two');
    const all = await Promise.all(polls);
    expect(all.filter((r) => r.json<{ job_data: unknown }>().job_data !== null)).toHaveLength(2);

    // One session that may hold three jobs, a cap of one: its second poll answers at once, the first keeps waiting.
    const key = (await createNode(db, 'd')).key;
    const reg = await app.inject({
      method: 'POST',
      url: '/worker/register_node',
      headers: { authorization: `Bearer ${key}` },
      payload: { node_url: 'd', capacity: 3 },
    });
    const auth = { authorization: `Bearer ${reg.json<{ access_token: string }>().access_token}` };
    expect((await app.inject({ method: 'POST', url: '/worker/update_models', headers: auth, payload: { models: ['m'] } })).statusCode).toBe(200);
    const poll = (remoteAddress: string) =>
      app.inject({ method: 'GET', url: '/worker/get_job?node_version=1&wait=30', remoteAddress, headers: auth });
    const waiting = poll('10.2.0.3');
    await until('the first poll to wait', () => app.metrics.live.waitingWorkers() === 1, 20_000);
    const twice = [waiting, poll('10.2.0.4')];
    const flags = settledFlags(twice);
    expect((await Promise.race(twice)).json()).toEqual({ job_data: null });
    expect(flags).toEqual([false, true]);
    await user.submit('m', 'three');
    expect((await waiting).json<{ job_data: unknown }>().job_data).not.toBeNull();
  });
});

describe('low finding: the embedded data directory', () => {
  it('leaves no file group- or world-writable (nor readable by others) in an existing 0755 DATA_DIR', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ins-modes-'));
    try {
      const data = path.join(dir, 'data');
      // As the image's volume or an operator's directory may be.
      mkdirSync(data, { mode: 0o755 });
      const db = await openPglite(data);
      await db.close();
      const loose: string[] = [];
      const walk = (d: string): void => {
        for (const e of readdirSync(d, { withFileTypes: true })) {
          const p = path.join(d, e.name);
          if (statSync(p).mode & 0o027) loose.push(`${(statSync(p).mode & 0o777).toString(8)} ${path.relative(data, p)}`);
          if (e.isDirectory()) walk(p);
        }
      };
      walk(data);
      expect(loose).toEqual([]);
      expect(readdirSync(data).length).toBeGreaterThan(5);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.each(backends)('held up on $name (issue 20): key kinds on every route, isolation, sessions, logs and metrics', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>> | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it('takes each kind of key only where the contract says, on every keyed route', async () => {
    const a = (t = await startApp(backend));
    const user = new TestUser(a.app, await a.addUser());
    const worker = await new TestWorker(a.app, 'gpu', await a.addNode('gpu')).start(['m']);
    const jobId = await user.submit('m');
    const job = (await worker.getJob())!;
    const keys = {
      node: (worker as unknown as { key: string }).key,
      reader: await a.addReader(),
      user: (user as unknown as { key: string }).key,
      session: worker.token,
      job: job.api_key,
    };
    type Kind = keyof typeof keys;
    const inject = a.app.inject.bind(a.app);
    // Each route: how its key travels, the kinds it takes, and what a refusal is (401/403; 400 for job_progress, whose only key is the job key).
    const routes: { name: string; allowed: Kind[]; refused?: number[]; send: (key: string) => Promise<Awaited<ReturnType<TestWorker['post']>>> }[] = [
      {
        name: 'daily_points',
        allowed: ['node', 'session', 'reader'],
        send: (k) => inject({ method: 'POST', url: '/daily_points', headers: { api_key: k }, payload: { node_name: 'gpu', last_days: 1 } }),
      },
      {
        name: 'get_points',
        allowed: ['node', 'session', 'reader'],
        send: (k) => inject({ method: 'GET', url: '/get_points?node_name=gpu', headers: { api_key: k } }),
      },
      {
        name: 'network/nodes',
        allowed: ['node', 'session', 'reader'],
        send: (k) => inject({ method: 'GET', url: '/network/nodes/gpu', headers: { api_key: k } }),
      },
      {
        name: 'submit_job',
        allowed: ['user'],
        send: (k) =>
          inject({
            method: 'POST',
            url: '/submit_job',
            headers: { api_key: k },
            payload: { model: 'other', messages: [{ role: 'user', content: 'x' }] },
          }),
      },
      { name: 'get_result', allowed: ['user'], send: (k) => inject({ method: 'GET', url: `/get_result/${jobId}`, headers: { api_key: k } }) },
      {
        name: 'get_completion_time',
        allowed: ['user'],
        send: (k) => inject({ method: 'GET', url: `/get_completion_time/${jobId}`, headers: { api_key: k } }),
      },
      {
        name: 'v1/chat/completions',
        allowed: ['user'],
        send: (k) =>
          inject({
            method: 'POST',
            url: '/v1/chat/completions',
            headers: { authorization: `Bearer ${k}` },
            payload: { model: 'nobody-serves', messages: [{ role: 'user', content: 'x' }] },
          }),
      },
      {
        name: 'register_node',
        allowed: ['node'],
        send: (k) =>
          inject({
            method: 'POST',
            url: '/worker/register_node',
            remoteAddress: '10.9.9.9',
            headers: { authorization: `Bearer ${k}` },
            payload: { node_url: 'gpu' },
          }),
      },
      {
        name: 'update_models',
        allowed: ['session'],
        send: (k) => inject({ method: 'POST', url: '/worker/update_models', headers: { authorization: `Bearer ${k}` }, payload: { models: ['m'] } }),
      },
      {
        name: 'job_progress',
        allowed: ['job'],
        refused: [400],
        send: (k) => inject({ method: 'POST', url: '/worker/job_progress', payload: { job_id: job.job_id, api_key: k, delta: 'x' } }),
      },
      {
        name: 'update_result',
        allowed: ['node', 'job'],
        send: (k) =>
          inject({
            method: 'POST',
            url: '/worker/update_result',
            payload: { job_id: job.job_id, api_key: k, model_name: 'm', result: { message: 'x' }, status: 'success' },
          }),
      },
      {
        name: 'get_job',
        allowed: ['session'],
        send: (k) => inject({ method: 'GET', url: '/worker/get_job?node_version=1', headers: { authorization: `Bearer ${k}` } }),
      },
    ];
    const wrong: string[] = [];
    for (const r of routes) {
      for (const kind of Object.keys(keys) as Kind[]) {
        const res = await r.send(keys[kind]);
        const refused = [401, 403, ...(r.refused ?? [])].includes(res.statusCode);
        if (refused === r.allowed.includes(kind) || res.statusCode >= 500)
          wrong.push(`${r.name} with a ${kind} key: ${res.statusCode} ${res.body.slice(0, 80)}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it("shows no user another user's job, and ends a node's sessions when its key is rotated", async () => {
    const a = (t = await startApp(backend));
    const owner = new TestUser(a.app, await a.addUser('owner'));
    const other = await a.addUser('other');
    const worker = await new TestWorker(a.app, 'gpu', await a.addNode('gpu')).start(['m']);
    const jobId = await owner.submit('m');
    expect((await worker.report((await worker.getJob())!)).statusCode).toBe(200);
    for (const url of [`/get_result/${jobId}`, `/get_completion_time/${jobId}`]) {
      expect((await a.app.inject({ method: 'GET', url, headers: { api_key: other } })).statusCode).toBe(404);
      expect(
        (await a.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${(owner as unknown as { key: string }).key}` } })).statusCode,
      ).toBe(200);
    }
    expect((await worker.getJobRaw()).statusCode).toBe(200);
    await rotateNodeKey(a.db, 'gpu');
    expect((await worker.getJobRaw()).statusCode).toBe(401);
    expect((await worker.post('/worker/update_models', { models: ['m'] }, true)).statusCode).toBe(401);
  });

  it('writes no key, prompt or answer into the logs or /metrics', async () => {
    const lines: string[] = [];
    const db = await backend.open();
    const logger = pino(
      { level: 'trace' },
      new Writable({
        write(chunk: Buffer, _enc, done) {
          lines.push(String(chunk));
          done();
        },
      }),
    );
    const app = await buildApp({ db, logger, verify: { enabled: false } });
    try {
      const nodeKey = (await createNode(db, 'gpu')).key;
      const userKey = (await addApiKey(db, 'user', 'app')).key;
      const worker = await new TestWorker(app, 'gpu', nodeKey).start(['m']);
      const user = new TestUser(app, userKey);
      const jobId = await user.submit('m', 'PROMPT-the-secret-question');
      const job = (await worker.getJob())!;
      expect((await worker.report(job, 'ANSWER-the-secret-answer')).statusCode).toBe(200);
      expect((await user.result(jobId)).statusCode).toBe(200);
      await app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { authorization: `Bearer ${userKey}` },
        payload: { model: 'MODEL-made-up', messages: [{ role: 'user', content: 'PROMPT-through-v1' }] },
      });
      await app.inject({
        method: 'POST',
        url: '/worker/update_result',
        payload: { job_id: 'x', api_key: 'nk_WRONG-key-guess', model_name: 'm', result: { message: 'x' }, status: 'success' },
      });
      const text = `${lines.join('')}\n${(await app.inject({ method: 'GET', url: '/metrics' })).body}`;
      expect(lines.length).toBeGreaterThan(5);
      for (const secret of [
        nodeKey,
        userKey,
        worker.token,
        job.api_key,
        'WRONG-key-guess',
        'PROMPT-the-secret-question',
        'ANSWER-the-secret-answer',
        'PROMPT-through-v1',
        'MODEL-made-up',
      ]) {
        expect(text).not.toContain(secret);
        expect(text).not.toContain(secret.slice(3, 20));
      }
    } finally {
      await app.close();
      await db.close();
    }
  });
});

describe.each(backends)('models a node brings into being on $name', (backend) => {
  it('at most 100 new names a UTC day per node, refused with 400 (which keeps the seed worker polling) beyond; known names always', async () => {
    const t = await startApp(backend);
    try {
      const w = await new TestWorker(t.app, 'namer', await t.addNode('namer')).start(['known-model']);
      const other = await new TestWorker(t.app, 'other-namer', await t.addNode('other-namer')).start([]);
      const count = async () => (await t.db.query<{ n: number }>(sql('t_models_count', 'SELECT count(*)::int AS n FROM models'))).at(0)!.n;
      const names = (from: number, n: number) => Array.from({ length: n }, (_, i) => `made-up-${from + i}`);
      // known-model was the first it named; 98 more make 99.
      expect((await w.post('/worker/update_models', { node_url: 'namer', models: names(0, 98) }, true)).statusCode).toBe(200);
      const before = await count();
      const over = await w.post('/worker/update_models', { node_url: 'namer', models: ['known-model', ...names(98, 2)] }, true);
      expect(over.statusCode).toBe(400);
      expect(over.json().detail).toMatch(
        /^this declaration names 2 models the network does not know, and this node named 99 new ones today \(UTC\): a node may name at most 100 a day\. Nothing was declared/,
      );
      expect(await count()).toBe(before);
      // Names the network knows are declared as ever; another node has its own 100.
      expect((await w.post('/worker/update_models', { node_url: 'namer', models: ['known-model', ...names(0, 98)] }, true)).statusCode).toBe(200);
      expect((await w.post('/worker/update_models', { node_url: 'namer', models: ['known-model', ...names(0, 99)] }, true)).statusCode).toBe(200); // the 100th
      expect((await other.post('/worker/update_models', { node_url: 'other-namer', models: names(200, 5) }, true)).statusCode).toBe(200);
    } finally {
      await t.close();
    }
  });

  it("leaves out a name that can be no model's and declares the rest (a 422 stops the seed worker for hours); more than 1,000 names is 400", async () => {
    const t = await startApp(backend);
    try {
      const w = await new TestWorker(t.app, 'odd-list', await t.addNode('odd-list')).start([]);
      const long = 'x'.repeat(257);
      const res = await w.post('/worker/update_models', { node_url: 'odd-list', models: ['llama3.2:latest', '', long, 'qwen:7b'] }, true);
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json()).toMatchObject({ status: 'success', models: ['llama3.2:latest', 'qwen:7b'], ignored: ['', long] });
      expect(((await t.app.inject({ method: 'GET', url: '/available_models' })).json() as { models: string[] }).models).toEqual([
        'llama3.2:latest',
        'qwen:7b',
      ]);
      // 256 characters (code points) is a name; nothing left out, no `ignored`.
      const fine = await w.post('/worker/update_models', { node_url: 'odd-list', models: ['é'.repeat(256)] }, true);
      expect(fine.statusCode, fine.body).toBe(200);
      expect(fine.json()).not.toHaveProperty('ignored');
      const many = await w.post('/worker/update_models', { node_url: 'odd-list', models: Array.from({ length: 1001 }, (_, i) => `m-${i}`) }, true);
      expect(many.statusCode).toBe(400);
      expect(many.json().detail).toMatch(/^1001 models named: a node may serve at most 1000\. Nothing was declared/);
    } finally {
      await t.close();
    }
  });

  it('at most 1,000 models a node serves over all its sessions, names the network knows included (a node-key report may bring any in)', async () => {
    const t = await startApp(backend);
    try {
      const key = await t.addNode('many');
      const a = await new TestWorker(t.app, 'many', key).start([]);
      const b = await new TestWorker(t.app, 'many', key).start([]);
      // Known names: as reports under CREDIT_POLICY=reports would have made them, past any daily bound.
      await t.db.query(sql('t_many_models', "INSERT INTO models (name) SELECT 'known-' || g FROM generate_series(1, 1001) AS g"));
      const known = (from: number, n: number) => Array.from({ length: n }, (_, i) => `known-${from + i}`);
      expect((await a.post('/worker/update_models', { node_url: 'many', models: known(1, 600) }, true)).statusCode).toBe(200);
      const over = await b.post('/worker/update_models', { node_url: 'many', models: known(601, 401) }, true);
      expect(over.statusCode).toBe(400);
      expect(over.json().detail).toMatch(/would serve 1001 models over its sessions: a node may serve at most 1000/);
      expect((await b.post('/worker/update_models', { node_url: 'many', models: known(601, 400) }, true)).statusCode).toBe(200); // 1,000 in all
      expect(((await t.app.inject({ method: 'GET', url: '/available_models' })).json() as { models: string[] }).models).toHaveLength(1000);
      // A session whose declaration lapsed (a worker restarted without deregistering) serves nothing, and counts for nothing.
      await t.db.query(
        sql(
          't_many_lapse',
          "UPDATE node_sessions SET models_declared_at = now() - interval '30 days' WHERE id = (SELECT min(s.id) FROM node_sessions s JOIN nodes n ON n.id = s.node_id WHERE n.name = 'many')",
        ),
      );
      expect((await b.post('/worker/update_models', { node_url: 'many', models: known(2, 1000) }, true)).statusCode).toBe(200); // with a's 1..600: 1,001
    } finally {
      await t.close();
    }
  });
});
