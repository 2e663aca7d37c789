// The deploy/ stack on this machine: Debian's PgBouncer (transaction mode) in front of the test
// PostgreSQL, two `ins serve` processes behind Debian's nginx running deploy/nginx/ins.conf —
// what deploy/compose.yaml runs. Through nginx: a worker's long poll answered by a job submitted
// meanwhile (on either server), an OpenAI stream that arrives event by event as the node writes
// it, and the per-address rate limit keyed on the address nginx saw, whatever the client writes
// into X-Forwarded-For. Clients connect from their own loopback addresses (127.0.0.2…) so that
// nginx tells them apart (a client on nginx's own address would be a trusted proxy).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../src/db/database.js';
import { openPostgres } from '../src/db/pg.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { addApiKey } from '../src/nodes/api-keys.js';
import { createPostgresDatabase, TEST_DATABASE_URL } from './helpers/db.js';
import { NGINX, startNginx, type Nginx } from './helpers/nginx.js';
import { PGBOUNCER, startPgBouncer, type PgBouncer } from './helpers/pgbouncer.js';
import { ROOT, startServerProcess, type ServerProcess } from './helpers/process.js';

const PER_IP = 30;
const MODEL = 'proxied-model';
const missing = [
  !TEST_DATABASE_URL && 'TEST_DATABASE_URL',
  !NGINX && 'nginx (apt-get install nginx)',
  !PGBOUNCER && 'pgbouncer (apt-get install pgbouncer)',
].filter(Boolean);
if (missing.length) console.warn(`test/proxy.test.ts skipped: needs ${missing.join(', ')}`);

describe.runIf(missing.length === 0)('behind nginx, two servers on PgBouncer (deploy/)', () => {
  let drop: () => Promise<void>;
  let db: Database;
  let bouncer: PgBouncer;
  let nginx: Nginx;
  const servers: ServerProcess[] = [];
  const agents = new Map<string, Agent>();
  let nodeKey: string;
  let userKey: string;

  /** A request through nginx from a client at `address`. */
  const call = (address: string, method: 'GET' | 'POST', url: string, opts: { body?: object; headers?: Record<string, string> } = {}) => {
    if (!agents.has(address)) agents.set(address, new Agent({ localAddress: address }));
    return request(`${nginx.url}${url}`, {
      dispatcher: agents.get(address)!,
      method,
      headers: { ...(opts.body ? { 'content-type': 'application/json' } : {}), ...opts.headers },
      ...(opts.body ? { body: JSON.stringify(opts.body) } : {}),
    });
  };
  const json = async (r: ReturnType<typeof call>) => {
    const res = await r;
    return { status: res.statusCode, body: (await res.body.json()) as any };
  };
  const waitingWorkers = async () => {
    let n = 0;
    for (const s of servers) {
      const text = await (await fetch(`${s.url}/metrics`)).text();
      n += Number(/^ins_workers_waiting (\d+)/m.exec(text)?.[1] ?? 0);
    }
    return n;
  };

  const WORKER = '127.0.0.4';
  let token = '';
  const worker = {
    async start() {
      expect((await json(call(WORKER, 'POST', '/check_node_secret', { body: { node_id: 'proxied-node', secret: nodeKey } }))).status).toBe(200);
      const reg = await json(
        call(WORKER, 'POST', '/worker/register_node', {
          body: { node_url: 'proxied-node', node_version: '0.1.0', stats: { ram: 64, cpu: 16, vram: 24, gpu: 'test', os: 'linux' } },
        }),
      );
      token = reg.body.access_token;
      expect(
        (
          await json(
            call(WORKER, 'POST', '/worker/update_models', {
              body: { node_url: 'proxied-node', models: [MODEL] },
              headers: { authorization: `Bearer ${token}` },
            }),
          )
        ).status,
      ).toBe(200);
    },
    poll: () => json(call(WORKER, 'GET', '/worker/get_job?node_version=0.1.0&wait=30', { headers: { authorization: `Bearer ${token}` } })),
    post: (url: string, body: object) => json(call(WORKER, 'POST', url, { body })),
  };

  beforeAll(async () => {
    const created = await createPostgresDatabase();
    drop = created.drop;
    const name = new URL(created.url).pathname.slice(1);
    db = openPostgres({ connectionString: created.url, max: 2 });
    // The database defaults deploy/postgres/init.sql sets for statements through the pooler.
    await db.exec(
      readFileSync(path.join(ROOT, 'deploy', 'postgres', 'init.sql'), 'utf8').replaceAll('ALTER DATABASE ins ', `ALTER DATABASE ${name} `),
    );
    bouncer = await startPgBouncer(TEST_DATABASE_URL!);
    // Both migrate at once, through the pooler (a transaction-scoped advisory lock).
    servers.push(
      ...(await Promise.all(
        [0, 1].map(() =>
          startServerProcess({
            DATABASE_URL: bouncer.url(name),
            DATABASE_DIRECT_URL: created.url,
            DATABASE_POOLER: 'transaction',
            TRUST_PROXY: '127.0.0.1',
            RATE_LIMIT_PER_IP: String(PER_IP),
            LOG_LEVEL: 'warn',
          }),
        ),
      )),
    );
    nginx = await startNginx(servers.map((s) => new URL(s.url).host));
    nodeKey = (await createNode(db, 'proxied-node')).key;
    userKey = (await addApiKey(db, 'user', 'proxied-app')).key;
    await worker.start();
  });
  afterAll(async () => {
    // destroy, not close: a long poll of a failed test may still be open.
    for (const a of agents.values()) await a.destroy();
    await nginx?.stop();
    for (const s of servers) {
      s.child.kill('SIGTERM');
      await s.exited;
    }
    await bouncer?.stop();
    await db?.close();
    await drop?.();
  });

  it('starts both servers through PgBouncer without a word about the pooler (told, and the database defaults set)', () => {
    for (const s of servers) expect(s.logs()).not.toMatch(/pooler|ALTER DATABASE|DATABASE_DIRECT_URL/);
  });

  it("answers a worker's long poll with a job submitted meanwhile, whichever server has either", async () => {
    const polling = worker.poll();
    await expect.poll(waitingWorkers).toBe(1);
    const submitted = await json(
      call('127.0.0.5', 'POST', '/submit_job', {
        body: { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_output: 0, temperature: 0 },
        headers: { api_key: userKey },
      }),
    );
    expect(submitted.status).toBe(200);
    const { body } = await polling;
    expect(body.job_data.job_id).toBe(submitted.body.job_id);
    expect(
      (
        await worker.post('/worker/update_result', {
          job_id: body.job_data.job_id,
          api_key: body.job_data.api_key,
          model_name: MODEL,
          result: { message: { role: 'assistant', content: 'hello' } },
          status: 'success',
        })
      ).status,
    ).toBe(200);
    const result = await json(call('127.0.0.5', 'GET', `/get_result/${submitted.body.job_id}?wait=30`, { headers: { api_key: userKey } }));
    expect(result.body).toMatchObject({ status: 'success', result: { message: { content: 'hello' } } });
  });

  it('streams a chat completion through nginx as the node writes it', async () => {
    const polling = worker.poll();
    await expect.poll(waitingWorkers).toBe(1);
    const res = await call('127.0.0.5', 'POST', '/v1/chat/completions', {
      body: { model: MODEL, stream: true, messages: [{ role: 'user', content: 'say hello' }] },
      headers: { authorization: `Bearer ${userKey}` },
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/event-stream/);
    // Events as they arrive: each read waits for the next one.
    const reader = res.body[Symbol.asyncIterator]();
    let buffered = '';
    const nextEvent = async (): Promise<string> => {
      for (;;) {
        const end = buffered.indexOf('\n\n');
        if (end >= 0) {
          const event = buffered.slice(0, end);
          buffered = buffered.slice(end + 2);
          const data = event.split('\n').find((l) => l.startsWith('data: '));
          if (data) return data.slice(6);
          continue; // a keep-alive comment
        }
        const { value, done } = await reader.next();
        if (done) throw new Error(`the stream ended; left: ${buffered}`);
        buffered += (value as Buffer).toString();
      }
    };
    const delta = (data: string) => JSON.parse(data).choices[0].delta;
    // The first event comes before any node has answered: nothing held it back.
    expect(delta(await nextEvent())).toEqual({ role: 'assistant', content: '' });
    const job = (await polling).body.job_data;
    expect((await worker.post('/worker/job_progress', { job_id: job.job_id, api_key: job.api_key, delta: 'Hello' })).status).toBe(200);
    expect(delta(await nextEvent())).toEqual({ content: 'Hello' });
    expect(
      (
        await worker.post('/worker/update_result', {
          job_id: job.job_id,
          api_key: job.api_key,
          model_name: MODEL,
          result: { message: { role: 'assistant', content: 'Hello, world' } },
          status: 'success',
        })
      ).status,
    ).toBe(200);
    expect(delta(await nextEvent())).toEqual({ content: ', world' });
    expect(JSON.parse(await nextEvent()).choices[0].finish_reason).toBe('stop');
    expect(await nextEvent()).toBe('[DONE]');
  });

  it('tells nginx not to buffer long polls (X-Accel-Buffering: no; nginx keeps the header to itself)', async () => {
    const direct = await request(`${servers[0]!.url}/worker/get_job?node_version=0.1.0&wait=1`, { headers: { authorization: `Bearer ${token}` } });
    await direct.body.dump();
    expect(direct.headers['x-accel-buffering']).toBe('no');
  });

  it('limits each client by the address nginx saw; writing X-Forwarded-For does not make another client', async () => {
    // Each server counts on its own: a client is limited once both have seen PER_IP of its requests.
    let inARow = 0;
    let sent = 0;
    while (inARow < 2 && sent < 2 * PER_IP + 4) {
      const res = await json(call('127.0.0.2', 'GET', '/unique_nodes?model_name=m', { headers: { 'x-forwarded-for': `198.51.100.${sent % 250}` } }));
      sent++;
      inARow = res.status === 429 ? inARow + 1 : 0;
    }
    expect(inARow).toBe(2);
    expect(sent).toBeGreaterThan(PER_IP);
    expect((await json(call('127.0.0.3', 'GET', '/unique_nodes?model_name=m'))).status).toBe(200);
  });
});

describe('deploy/nginx/ins.conf', () => {
  it("gives every path that waits for a job the long read timeout (before, /v1/completions past 90 s got nginx's 504)", () => {
    const conf = readFileSync(path.join(ROOT, 'deploy', 'nginx', 'ins.conf'), 'utf8');
    const long = [...conf.matchAll(/location ~ (\S+) \{([^}]*)\}/g)]
      .filter((m) => /proxy_read_timeout 3700s;/.test(m[2]!))
      .map((m) => new RegExp(m[1]!));
    expect(long).toHaveLength(1);
    for (const p of ['/v1/chat/completions', '/chat/completions', '/v1/completions', '/v1/embeddings']) expect(long[0]!.test(p), p).toBe(true);
    for (const p of ['/v1/models', '/worker/get_job', '/get_result/x', '/v1/chat/completions/x']) expect(long[0]!.test(p), p).toBe(false);
  });
});
