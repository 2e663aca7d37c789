// `ins worker` for real: the server and the worker as processes, backends that are real HTTP
// servers speaking Ollama's and OpenAI's wire formats (test/helpers/backends.ts). Jobs through
// each kind of backend with their usage; partial output streamed to an OpenAI client; a backend
// killed mid-job; SIGTERM mid-job, and while the server is away; three workers sharing 1,500
// jobs; the server killed and restarted under a running worker.
// The operator's commands (node add, node list, job show) go to the running server the way
// `ins` forwards them (its admin socket, src/cli/admin-socket.ts), from this process: a CLI
// process each cost more than the rest of the file on a busy machine.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forwardToServer } from '../src/cli/admin-socket.js';
import { CLEAN_EXIT, freePort, startServerProcess, startWorkerProcess, type ServerProcess, stopped } from './helpers/process.js';
import { answerOf, startFakeBackend, type FakeBackend } from './helpers/backends.js';
import { until } from './helpers/wait.js';

const dir = mkdtempSync(path.join(tmpdir(), 'ins-worker-'));
const env = { DATA_DIR: path.join(dir, 'data'), SWEEP_INTERVAL: '200ms' };

describe('ins worker', () => {
  let server: ServerProcess;
  let port: number;
  let userKey: string;
  let readerKey: string;
  const workers: ServerProcess[] = [];
  const backends: FakeBackend[] = [];

  /** `ins ARGV` as the CLI runs it while the server holds the database; its stdout. */
  const ins = async (argv: string[]) => {
    const r = await forwardToServer(env.DATA_DIR, argv);
    if (r?.code !== 0) throw new Error(`ins ${argv.join(' ')}: ${JSON.stringify(r)}`);
    return r.stdout.join('\n');
  };
  const addNode = async (name: string) => (await ins(['node', 'add', name])).trim();
  const backend = async (kind: 'ollama' | 'openai', models: string[]) => {
    const b = await startFakeBackend(kind, models);
    backends.push(b);
    return b;
  };
  const worker = async (name: string, b: FakeBackend, extra: string[] = []) => {
    const key = await addNode(name);
    const w = startWorkerProcess(['--server', server.url, '--node', name, '--backend', b.kind, '--backend-url', b.url, ...extra], {
      INS_NODE_KEY: key,
    });
    workers.push(w);
    // Registered and its models declared: it polls.
    await until(`${name} to declare its models`, () => w.logs().includes('models declared'), 20_000);
    return w;
  };
  const api = async <T>(p: string, init: RequestInit = {}) => {
    const res = await fetch(`${server.url}${p}`, { ...init, headers: { 'content-type': 'application/json', api_key: userKey, ...init.headers } });
    return { status: res.status, body: (await res.json()) as T };
  };
  const submit = async (model: string, content: string) =>
    (
      await api<{ job_id: string }>('/submit_job', {
        method: 'POST',
        body: JSON.stringify({ model, messages: [{ role: 'user', content }], max_output: 32, temperature: 0 }),
      })
    ).body.job_id;
  const result = async (jobId: string) => {
    for (;;) {
      const r = await api<{ status: string; result: { message: { content: string } }; usage?: unknown }>(`/get_result/${jobId}?wait=20`);
      if (r.status === 200) return r.body;
    }
  };
  const nodes = async () =>
    JSON.parse(await ins(['node', 'list', '--json'])) as {
      name: string;
      online: boolean;
      total_points: number;
      open_leases: number;
      models: string[];
    }[];

  beforeAll(async () => {
    port = await freePort();
    server = await startServerProcess(env, port);
    userKey = (await ins(['key', 'add-user', 'app'])).trim();
    readerKey = (await ins(['key', 'add-reader', 'audit'])).trim();
  });
  afterAll(async () => {
    for (const w of workers) if (w.child.exitCode === null) w.child.kill('SIGKILL');
    for (const b of backends) await b.close();
    // (Absent when it could not start: the failure to report is that one.)
    if (server) {
      server.child.kill('SIGTERM');
      await server.exited;
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('runs jobs on Ollama and carries the usage it reports', async () => {
    const b = await backend('ollama', ['llama3.2:latest', 'qwen2.5:0.5b']);
    await worker('ollama-node', b);
    expect((await nodes()).find((n) => n.name === 'ollama-node')).toMatchObject({ online: true, models: ['llama3.2:latest', 'qwen2.5:0.5b'] });
    const ids = await Promise.all(['one two', 'three'].map((c) => submit('qwen2.5:0.5b', c)));
    const done = await Promise.all(ids.map(result));
    expect(done.map((d) => d.result.message.content)).toEqual([
      answerOf('qwen2.5:0.5b', [{ content: 'one two' }]),
      answerOf('qwen2.5:0.5b', [{ content: 'three' }]),
    ]);
    expect(done[0]!.usage).toEqual({ prompt_tokens: 2, completion_tokens: 3 });
    const points = await api<{ pointsraw: number }>('/get_points?node_name=ollama-node', { headers: { api_key: readerKey } });
    expect(points.body.pointsraw).toBe(2);
  });

  it('runs jobs on an OpenAI-compatible server, and streams its partial output to an OpenAI client', async () => {
    const b = await backend('openai', ['mistral-7b', 'not-this-one']);
    await worker('vllm-node', b, ['--models', 'mistral-7b']);
    expect((await nodes()).find((n) => n.name === 'vllm-node')!.models).toEqual(['mistral-7b']);
    const done = await result(await submit('mistral-7b', 'a b c'));
    expect(done).toMatchObject({
      status: 'success',
      result: { message: { content: answerOf('mistral-7b', [{ content: 'a b c' }]) } },
      usage: { prompt_tokens: 3, completion_tokens: 4 },
    });
    // The backend stops after two pieces until the client has seen the first, so that the client
    // sees the answer in pieces whatever the machine's pace (a 600 ms generation alone reached
    // it in two on a loaded run, not three).
    b.delayMs = 300;
    b.pauseAfter = 2;
    const client = new OpenAI({ apiKey: userKey, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: 'mistral-7b',
      messages: [{ role: 'user', content: 'stream this answer please' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const pieces: string[] = [];
    let usage: unknown;
    for await (const c of stream) {
      if (c.choices[0]?.delta.content) {
        pieces.push(c.choices[0].delta.content);
        if (pieces.length === 1) {
          await expect.poll(() => b.paused).toBe(1);
          b.resume();
        }
      }
      if (c.usage) usage = c.usage;
    }
    expect(b.paused).toBe(1);
    expect(pieces.join('')).toBe(answerOf('mistral-7b', [{ content: 'stream this answer please' }]));
    expect(pieces.length).toBeGreaterThanOrEqual(2);
    expect(usage).toEqual({ prompt_tokens: 4, completion_tokens: 5, total_tokens: 9 });
  });

  it('gives the job of a backend killed mid-job to another worker, done once', async () => {
    const fragile = await backend('ollama', ['fragile-model']);
    fragile.stallAfter = 0;
    await worker('fragile-node', fragile);
    const jobId = await submit('fragile-model', 'survive');
    await until('the fragile backend to get the job', () => fragile.calls === 1, 20_000);
    await fragile.kill();
    const sturdy = await backend('ollama', ['fragile-model']);
    await worker('sturdy-node', sturdy);
    const done = await result(jobId);
    expect(done.result.message.content).toBe(answerOf('fragile-model', [{ content: 'survive' }]));
    const shown = JSON.parse(await ins(['job', 'show', jobId, '--json'])) as { node: string; leases: { node: string; outcome: string }[] };
    expect(shown.node).toBe('sturdy-node');
    expect(shown.leases.map((l) => [l.node, l.outcome])).toEqual([
      ['fragile-node', 'error'],
      ['sturdy-node', 'done'],
    ]);
    // Its backend gone, the fragile node declares no models: it takes no job it cannot run.
    await until(
      'the fragile node to declare no models',
      async () => (await nodes()).find((n) => n.name === 'fragile-node')!.models.length === 0,
      20_000,
    );
  });

  it('on SIGTERM finishes the job in flight, reports it, deregisters and exits 0', async () => {
    const b = await backend('openai', ['slow-model']);
    const w = await worker('leaving-node', b, ['--concurrency', '2']);
    // The answer waits until the worker has been told to stop. Set once the worker has declared
    // its models: its start-up probe of tool support (a chat call, src/worker/openai-compatible.ts)
    // must not be the paused call this test takes for the job.
    b.pauseAfter = 0;
    const jobId = await submit('slow-model', 'last one');
    await until('the backend to get the job', () => b.paused === 1, 20_000);
    w.child.kill('SIGTERM');
    await until('the worker to stop taking jobs', () => w.logs().includes('stopping: 1 job(s) in flight'), 20_000);
    b.resume();
    expect(await stopped(w, false), w.logs()).toEqual(CLEAN_EXIT);
    expect((await result(jobId)).result.message.content).toBe(answerOf('slow-model', [{ content: 'last one' }]));
    expect(w.logs()).toContain('deregistered');
    // Its other slots' waiting polls were aborted by the stop, not failed: nothing says "retrying".
    expect(w.logs()).not.toContain('retrying');
    expect((await nodes()).find((n) => n.name === 'leaving-node')).toMatchObject({ online: false, open_leases: 0, total_points: 1 });
  });

  it('gives a job back, not as a failure, when --grace runs out: no error report, and another node finishes it', async () => {
    const b = await backend('openai', ['grace-model']);
    const w = await worker('graceless-node', b, ['--grace', '1']);
    b.pauseAfter = 0;
    const jobId = await submit('grace-model', 'never finished here');
    await until('the backend to get the job', () => b.paused === 1, 20_000);
    w.child.kill('SIGTERM');
    expect(await stopped(w, false), w.logs()).toEqual(CLEAN_EXIT);
    expect(w.logs()).toContain('--grace ran out');
    expect(w.logs()).not.toContain('failed on the backend');
    b.resume();
    // Its lease ended with the deregistration ("released"), not an error report.
    const shown = JSON.parse(await ins(['job', 'show', jobId, '--json'])) as { state: string; leases: { node: string; outcome: string | null }[] };
    expect(shown.leases).toEqual([expect.objectContaining({ node: 'graceless-node', outcome: 'released' })]);
    await worker('graceful-node', await backend('openai', ['grace-model']));
    expect((await result(jobId)).result.message.content).toBe(answerOf('grace-model', [{ content: 'never finished here' }]));
  });

  // 1,500 jobs through one server and three worker processes: on a machine busy with other
  // work this takes longer than the default minute.
  it('three workers share 1,500 jobs: each done once, points exactly the jobs done', { timeout: 180_000 }, async () => {
    const names = ['many-1', 'many-2', 'many-3'];
    await Promise.all(names.map(async (name) => worker(name, await backend('ollama', ['bulk-model']), ['--concurrency', '4'])));
    const ids: string[] = [];
    for (let i = 0; i < 1500; i += 100) ids.push(...(await Promise.all(Array.from({ length: 100 }, (_, k) => submit('bulk-model', `q${i + k}`)))));
    // Waited for 50 at a time: a key's long polls past RATE_LIMIT_LONG_POLLS_PER_KEY (64) answer at
    // once, and 1,500 of them would spin instead of waiting.
    const done: Awaited<ReturnType<typeof result>>[] = [];
    for (let i = 0; i < ids.length; i += 50) done.push(...(await Promise.all(ids.slice(i, i + 50).map(result))));
    expect(done.every((d, i) => d.result.message.content === answerOf('bulk-model', [{ content: `q${i}` }]))).toBe(true);
    const listed = (await nodes()).filter((n) => names.includes(n.name));
    expect(listed.reduce((s, n) => s + n.total_points, 0)).toBe(1500);
    expect(listed.every((n) => n.total_points > 0)).toBe(true);
    const counts = await api<{ by_state: Record<string, number> }>('/total_job_count');
    expect(counts.body.by_state.leased ?? 0).toBe(0);
  });

  it('on SIGTERM lets a report already on its way finish: the job is credited once, not run again', async () => {
    // Between the worker and the server, a proxy that holds reports until told, and drops one
    // whose worker hung up meanwhile (as the network would).
    let hold = true;
    const held: (() => void)[] = [];
    const proxy = createHttpServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const forward = () => {
          if (res.destroyed || req.socket.destroyed) return;
          const headers = Object.fromEntries(
            Object.entries(req.headers).filter(([k]) => !['host', 'connection', 'content-length'].includes(k)),
          ) as Record<string, string>;
          fetch(`${server.url}${req.url}`, { method: req.method, headers, ...(req.method === 'POST' ? { body: Buffer.concat(chunks) } : {}) })
            .then(async (r) => {
              res
                .writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' })
                .end(Buffer.from(await r.arrayBuffer()));
            })
            .catch(() => res.destroy());
        };
        // A report travels with the ask for the next job on the worker's own wire (jobs/next).
        if (hold && req.url === '/worker/jobs/next' && Buffer.concat(chunks).includes('"api_key":"jk_')) held.push(forward);
        else forward();
      });
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    try {
      const b = await backend('ollama', ['relayed-model']);
      const key = await addNode('relayed-node');
      const w = startWorkerProcess(
        [
          '--server',
          `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
          '--node',
          'relayed-node',
          '--backend',
          'ollama',
          '--backend-url',
          b.url,
        ],
        { INS_NODE_KEY: key },
      );
      workers.push(w);
      await until('relayed-node to declare its models', () => w.logs().includes('models declared'), 20_000);
      const jobId = await submit('relayed-model', 'on its way');
      await until('the report to reach the proxy', () => held.length === 1, 20_000);
      w.child.kill('SIGTERM');
      await until('the worker to stop taking jobs', () => w.logs().includes('stopping: 0 job(s) in flight'), 20_000);
      hold = false;
      held.shift()!();
      expect(await stopped(w, false), w.logs()).toEqual(CLEAN_EXIT);
      expect(w.logs()).not.toContain('was refused');
      expect((await result(jobId)).result.message.content).toBe(answerOf('relayed-model', [{ content: 'on its way' }]));
      expect(b.calls).toBe(1);
      expect((await nodes()).find((n) => n.name === 'relayed-node')).toMatchObject({ online: false, open_leases: 0, total_points: 1 });
    } finally {
      await new Promise((r) => proxy.close(r));
    }
  });

  it('stops at once on SIGTERM while the server is away, not after its next pause, and exits 0', async () => {
    // A "server" that takes each connection and drops it: every call fails and is retried.
    let connections = 0;
    let afterStop = 0;
    let stopping = false;
    const away = createServer((s) => {
      connections++;
      if (stopping) afterStop++;
      s.destroy();
    });
    await new Promise<void>((r) => away.listen(0, '127.0.0.1', r));
    try {
      const b = await backend('ollama', ['away-model']);
      const w = startWorkerProcess(
        [
          '--server',
          `http://127.0.0.1:${(away.address() as AddressInfo).port}`,
          '--node',
          'away-node',
          '--backend',
          'ollama',
          '--backend-url',
          b.url,
          '--retry-max',
          '3600',
        ],
        { INS_NODE_KEY: 'nk_unused' },
      );
      workers.push(w);
      // Its third try failed: the pause before the fourth is 2 to 4 s.
      await until('the worker to retry three times', () => /"attempt":3,"msg":"register_node failed/.test(w.logs()), 20_000);
      stopping = true;
      w.child.kill('SIGTERM');
      expect(await stopped(w, false), w.logs()).toEqual(CLEAN_EXIT);
      expect(connections).toBeGreaterThanOrEqual(3);
      expect(afterStop).toBe(0);
    } finally {
      await new Promise((r) => away.close(r));
    }
  });

  it('resumes by itself when the server is killed and started again', async () => {
    const b = await backend('ollama', ['phoenix-model']);
    // Tries again at least every second while the server is away (instead of up to every 30 s).
    const w = await worker('phoenix-node', b, ['--retry-max', '1']);
    expect((await result(await submit('phoenix-model', 'before'))).status).toBe('success');
    server.child.kill('SIGKILL');
    await server.exited;
    await until('the worker to notice the server is away', () => /(get_job|update_result|jobs\/next) failed .*retrying/.test(w.logs()), 20_000);
    server = await startServerProcess(env, port);
    // The same worker process, its session intact, takes the next job.
    expect((await result(await submit('phoenix-model', 'after'))).result.message.content).toBe(answerOf('phoenix-model', [{ content: 'after' }]));
    expect(w.child.exitCode).toBeNull();
    // It noticed the server was away (a poll or a report retried) and carried on.
    expect(w.logs()).toMatch(/(get_job|update_result|jobs\/next) failed .*retrying/);
  });
});
