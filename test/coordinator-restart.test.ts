// The coordinator survives SIGKILL: workers (the real worker's calls, retrying a report over a
// broken connection as it does) and users keep going while the server is killed in the middle
// of the load and started again. Every submitted job ends done exactly once, every
// acknowledged report stays, and no point is credited twice; on both backends.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createPostgresDatabase, TEST_DATABASE_URL } from './helpers/db.js';
import { CLEAN_EXIT, runCli, startServerProcess, type ServerProcess, stopped } from './helpers/process.js';
import { until } from './helpers/wait.js';

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups) await c();
});

const targets = [
  {
    name: 'embedded PGlite',
    env: async () => {
      const dir = mkdtempSync(path.join(tmpdir(), 'ins-coord-restart-'));
      cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
      return { DATA_DIR: dir };
    },
  },
  ...(TEST_DATABASE_URL
    ? [
        {
          name: 'PostgreSQL',
          env: async () => {
            const { url, drop } = await createPostgresDatabase();
            cleanups.push(drop);
            // As an operator does: only `ins migrate` and `ins serve` migrate a PostgreSQL database.
            expect((await runCli(['migrate'], { DATABASE_URL: url })).code).toBe(0);
            return { DATABASE_URL: url };
          },
        },
      ]
    : []),
];

const MODEL = 'durable-model';

describe.each(targets)('coordinator: SIGKILL and restart on $name', (target) => {
  // Two server processes, four workers and a SIGKILL: on a machine busy with other work this
  // takes longer than the default minute.
  it('ends every submitted job done exactly once, loses no acknowledged report, credits nothing twice', { timeout: 180_000 }, async () => {
    const env = await target.env();
    const keys: Record<string, string> = {};
    for (const n of ['k0', 'k1', 'k2', 'k3']) keys[n] = (await runCli(['node', 'add', n], env)).stdout.trim();
    const userKey = (await runCli(['key', 'add-user', 'app'], env)).stdout.trim();
    const readerKey = (await runCli(['key', 'add-reader', 'audit'], env)).stdout.trim();

    let server: ServerProcess = await startServerProcess(env);
    let down = false;
    // Any call, retried over broken connections (dropped by the kill) and while the server is away
    // (as the real clients retry timeouts), for as long as the test may run.
    const call = async (p: string, init: RequestInit = {}): Promise<Response> => {
      let res: Response | undefined;
      await until(
        `an answer to ${p}`,
        async () => {
          if (!down)
            res = await fetch(`${server.url}${p}`, { ...init, headers: { 'content-type': 'application/json', ...init.headers } }).catch(
              () => undefined,
            );
          return res !== undefined;
        },
        180_000,
      );
      return res!;
    };
    const json = async <T>(p: string, init: RequestInit = {}): Promise<{ status: number; body: T }> => {
      const res = await call(p, init);
      return { status: res.status, body: (await res.json()) as T };
    };

    const credited = new Map<string, number>();
    const submitted: string[] = [];
    let stopWorkers = false;
    const workers = Object.entries(keys).map(async ([node, key]) => {
      expect((await json('/check_node_secret', { method: 'POST', body: JSON.stringify({ node_id: node, secret: key }) })).status).toBe(200);
      const reg = await json<{ access_token: string }>('/worker/register_node', {
        method: 'POST',
        body: JSON.stringify({ node_url: node, node_version: '1', stats: {} }),
      });
      const auth = { authorization: `Bearer ${reg.body.access_token}` };
      await json('/worker/update_models', { method: 'POST', headers: auth, body: JSON.stringify({ node_url: node, models: [MODEL] }) });
      while (!stopWorkers) {
        const got = await json<{ job_data: { job_id: string; api_key: string; model: string } | null }>('/worker/get_job?node_version=1&wait=1', {
          headers: auth,
        });
        const job = got.body.job_data;
        if (!job) continue;
        const r = await json<{ points: number; replayed: boolean }>('/worker/update_result', {
          method: 'POST',
          body: JSON.stringify({
            job_id: job.job_id,
            api_key: job.api_key,
            model_name: job.model,
            result: { message: `done by ${node}` },
            status: 'success',
          }),
        });
        expect([200, 400]).toContain(r.status);
        if (r.status === 200 && !r.body.replayed) credited.set(job.job_id, (credited.get(job.job_id) ?? 0) + r.body.points);
      }
    });
    const submitters = Array.from({ length: 4 }, async () => {
      for (let i = 0; i < 40; i++) {
        const sub = await json<{ job_id: string }>('/submit_job', {
          method: 'POST',
          headers: { api_key: userKey },
          body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: `q${i}` }], max_output: 0, temperature: 0 }),
        });
        expect(sub.status).toBe(200);
        submitted.push(sub.body.job_id);
        for (;;) {
          const res = await json<{ status: string }>(`/get_result/${sub.body.job_id}?wait=2`, { headers: { api_key: userKey } });
          if (res.status === 200) {
            expect(res.body.status).toBe('success');
            break;
          }
          expect(res.status).toBe(404);
        }
      }
    });

    // Killed in the middle of the load: once a few jobs went through, however slow the machine.
    await until(
      '20 jobs submitted',
      () => submitted.length >= 20,
      60_000,
      async () => `only ${submitted.length} jobs submitted`,
    );
    down = true;
    server.child.kill('SIGKILL');
    await server.exited;
    const before = submitted.length;
    server = await startServerProcess(env);
    down = false;
    try {
      await Promise.all(submitters);
      // Jobs a submission committed without its answer reaching us are done too.
      type Counts = { total_job_count: number; by_state: Record<string, number> };
      let counts!: { status: number; body: Counts };
      await until(
        'every job done',
        async () => {
          counts = await json<Counts>('/total_job_count');
          return (counts.body.by_state.done ?? 0) >= counts.body.total_job_count;
        },
        10_000,
        async () => `${counts.body.by_state.done ?? 0} of ${counts.body.total_job_count} done`,
      );
      stopWorkers = true;
      await Promise.all(workers);
      expect(before).toBeGreaterThanOrEqual(20);
      expect(before).toBeLessThan(160);
      expect(submitted.length).toBe(160);
      const total = counts.body.total_job_count;
      expect(total).toBeGreaterThanOrEqual(160);
      expect(total).toBeLessThanOrEqual(164);
      let points = 0;
      for (const node of Object.keys(keys)) {
        const res = await json<{ pointsraw: number }>(`/get_points?node_name=${node}`, { headers: { api_key: readerKey } });
        points += res.body.pointsraw;
      }
      const done = counts.body.by_state.done ?? 0;
      // Every job ended done; every acknowledged credit stands, none twice: the points are
      // exactly the jobs done (a report committed as the server died was answered as a replay).
      expect(done).toBe(total);
      expect([...credited.values()].every((p) => p === 1)).toBe(true);
      expect(points).toBe(done);
      expect(credited.size).toBeGreaterThan(done - 8);
    } finally {
      expect(await stopped(server), server.logs()).toEqual(CLEAN_EXIT);
    }
  });
});
