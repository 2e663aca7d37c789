// `ins worker` starting up, and what it tells its operator: a worker started before its
// inference server (at boot, say) waits for it without registering — its node is not shown
// online with nothing to run — and registers and declares its models once the server answers;
// a worker whose node is suspended says so (its polls only ever find no job); one given an
// OpenAI-compatible server's URL with OpenAI's /v1 uses the server's root and says so; a
// --metrics-port in use is one line and exit 1.
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { answerOf, startFakeBackend, type FakeBackend } from './helpers/backends.js';
import { startWorker, until } from './helpers/worker.js';
import { findNodeByName } from './helpers/production-paths.js';
import { strikeNode } from '../src/nodes/sql/standing.js';
import { runCli } from './helpers/process.js';
import { Worker } from '../src/worker/worker.js';

describe.each(backends)('ins worker before its backend answers ($name)', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let url: string;
  const closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    t = await startApp(backend);
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    for (const c of closers.reverse()) await c();
    await t.close();
  });

  /** A worker of a new node `node` on `backendUrl`, running, with its log lines. */
  const unstartedWorker = async (node: string, backendUrl: string) => {
    const logs: string[] = [];
    const worker = new Worker(
      {
        server: url,
        node,
        key: await t.addNode(node),
        backend: 'ollama',
        backendUrl,
        models: [],
        concurrency: 1,
        metricsPort: undefined,
        graceMs: 5_000,
        pollWait: 25,
        retryMaxMs: 30_000,
        continueAnswers: true,
      },
      { log: (level, msg) => logs.push(`${level}: ${msg}`), jobDone: () => {} },
    );
    return { worker, logs, running: worker.run() };
  };

  it('waits for the backend unregistered, then registers and takes jobs', async () => {
    // A port nothing listens on yet: the backend that will answer there later.
    const first = await startFakeBackend('ollama', ['late-model']);
    const port = Number(new URL(first.url).port);
    await first.close();
    const { worker, logs, running } = await unstartedWorker('late-node', first.url);
    closers.push(async () => {
      worker.stop();
      await running;
    });

    await until('the worker to say it waits for its backend', () => logs.some((l) => l.includes('waiting for it before registering')));
    expect(worker.state).toBe('backend down');
    expect(logs.some((l) => l.includes('registered'))).toBe(false);
    const online = async () => (await t.app.inject({ method: 'GET', url: '/active_node_count' })).json().active_node_count as number;
    expect(await online()).toBe(0);

    const later: FakeBackend = await startFakeBackend('ollama', ['late-model'], { port });
    closers.push(() => later.close());
    await until('the worker to declare its models', () => logs.some((l) => l.includes('models declared')));
    expect(await online()).toBe(1);
    const user = await t.addUser('late-app');
    const submitted = await t.app.inject({
      method: 'POST',
      url: '/submit_job',
      headers: { api_key: user },
      payload: { model: 'late-model', messages: [{ role: 'user', content: 'hello late' }] },
    });
    expect(submitted.statusCode).toBe(200);
    const done = await t.app.inject({ method: 'GET', url: `/get_result/${submitted.json().job_id}?wait=30`, headers: { api_key: user } });
    expect(done.json()).toMatchObject({ status: 'success' });
  });

  it('stopped while it waits for its backend: ends without registering', async () => {
    const gone = await startFakeBackend('ollama', ['never-model']);
    await gone.close();
    const { worker, logs, running } = await unstartedWorker('stopped-early', gone.url);
    await until('the worker to say it waits for its backend', () => logs.some((l) => l.includes('waiting for it before registering')));
    worker.stop();
    await running;
    // An outside probe saw stopping → registered → deregistered: the node shown online after its stop.
    expect(logs.filter((l) => /\b(de)?registered\b/.test(l))).toEqual([]);
    expect(worker.state).toBe('stopped');
  });

  it('says so when its backend fails while it runs, and again when it is back', async () => {
    const fake = await startFakeBackend('ollama', ['fading-model']);
    const port = Number(new URL(fake.url).port);
    const w = await startWorker({ server: url, node: 'fading-node', key: await t.addNode('fading-node'), backend: 'ollama', backendUrl: fake.url });
    closers.push(() => w.stop());
    await fake.close();
    const user = await t.addUser('fading-app');
    await t.app.inject({
      method: 'POST',
      url: '/submit_job',
      headers: { api_key: user },
      payload: { model: 'fading-model', messages: [{ role: 'user', content: 'are you there' }] },
    });
    await until('the worker to say its backend failed', () =>
      w.logs.some((l) => l.includes('the backend failed') && l.includes('no models declared')),
    );
    const back = await startFakeBackend('ollama', ['fading-model'], { port });
    closers.push(() => back.close());
    await until('the worker to say its backend is back', () => w.logs.some((l) => l.includes('the backend answers again')));
  });

  it("--backend-url with OpenAI's /v1, as OpenAI clients are given it: the server's root is used, said at start, and jobs run", async () => {
    const fake = await startFakeBackend('vllm', ['v1-model']);
    closers.push(() => fake.close());
    const w = await startWorker({ server: url, node: 'v1-node', key: await t.addNode('v1-node'), backend: 'vllm', backendUrl: `${fake.url}/v1` });
    closers.push(() => w.stop());
    expect(w.logs.find((l) => l.startsWith('info: backend: '))).toContain(`; reached at ${fake.url} {`);
    const user = await t.addUser('v1-app');
    const submitted = await t.app.inject({
      method: 'POST',
      url: '/submit_job',
      headers: { api_key: user },
      payload: { model: 'v1-model', messages: [{ role: 'user', content: 'through v1' }] },
    });
    expect(submitted.statusCode).toBe(200);
    const done = await t.app.inject({ method: 'GET', url: `/get_result/${submitted.json().job_id}?wait=30`, headers: { api_key: user } });
    expect(done.json()).toMatchObject({ status: 'success', result: { message: { content: answerOf('v1-model', [{ content: 'through v1' }]) } } });
  });

  it('pointed at a server that is no coordinator: says so', async () => {
    const fake = await startFakeBackend('ollama', ['some-model']);
    closers.push(() => fake.close());
    const worker = new Worker(
      {
        server: fake.url,
        node: 'lost-node',
        key: 'nk_x',
        backend: 'ollama',
        backendUrl: fake.url,
        models: [],
        concurrency: 1,
        metricsPort: undefined,
        graceMs: 5_000,
        pollWait: 25,
        retryMaxMs: 30_000,
        continueAnswers: true,
      },
      { log: () => {}, jobDone: () => {} },
    );
    await expect(worker.run()).rejects.toThrow(/HTTP 404: .*has no \/worker\/register_node: is --server this network's coordinator/);
  });

  it('--models: a name without a tag is its :latest, as Ollama reads it', async () => {
    const fake = await startFakeBackend('ollama', ['tagless:latest', 'tagless:7b', 'other:latest']);
    closers.push(() => fake.close());
    const w = await startWorker({
      server: url,
      node: 'tag-node',
      key: await t.addNode('tag-node'),
      backend: 'ollama',
      backendUrl: fake.url,
      models: ['tagless'],
    });
    closers.push(() => w.stop());
    expect(w.logs.find((l) => l.includes('models declared'))).toContain('{"models":["tagless:latest"]}');
  });

  it('says so when its node is suspended', async () => {
    const fake = await startFakeBackend('ollama', ['judged-model']);
    closers.push(() => fake.close());
    const w = await startWorker({
      server: url,
      node: 'judged-node',
      key: await t.addNode('judged-node'),
      backend: 'ollama',
      backendUrl: fake.url,
      checkEveryMs: 100,
    });
    closers.push(() => w.stop());
    const user = await t.addUser('judging-app');
    const jobId = (
      await t.app.inject({
        method: 'POST',
        url: '/submit_job',
        headers: { api_key: user },
        payload: { model: 'judged-model', messages: [{ role: 'user', content: 'judge me' }] },
      })
    ).json().job_id as string;
    await t.app.inject({ method: 'GET', url: `/get_result/${jobId}?wait=30`, headers: { api_key: user } });
    expect(w.logs.some((l) => l.includes('suspended'))).toBe(false);
    const node = (await findNodeByName(t.db, 'judged-node'))!;
    const { after, outcome } = await t.db.transaction((tx) => strikeNode(tx, node.id, jobId, 'give_up', { job_id: jobId }, 3600, 1));
    expect(after).toBe('suspended');
    t.app.service.nodes.apply(outcome);
    await until('the worker to say its node is suspended', () => w.logs.some((l) => l.startsWith('error: node judged-node is suspended')));
  });
});

describe('ins worker --metrics-port', () => {
  let held: Server;
  beforeAll(async () => {
    held = createServer();
    await new Promise<void>((r) => held.listen(0, r)); // every address, as the worker's metrics listen
  });
  afterAll(() => new Promise<void>((r) => held.close(() => r())));

  it('in use: one line saying so, exit 1', async () => {
    const port = (held.address() as { port: number }).port;
    const r = await runCli(
      [
        'worker',
        '--server',
        'http://127.0.0.1:9',
        '--node',
        'n',
        '--key',
        'nk_x',
        '--backend',
        'ollama',
        '--backend-url',
        'http://127.0.0.1:9',
        '--metrics-port',
        String(port),
      ],
      {},
    );
    expect(r.code).toBe(1);
    expect(r.stderr + r.stdout).toMatch(new RegExp(`--metrics-port ${port}: the port is in use`));
    expect(r.stderr + r.stdout).not.toMatch(/\n\s+at /);
  });
});
