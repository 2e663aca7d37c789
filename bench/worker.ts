// The worker scenario (`npm run bench -- --scenario worker`): `ins worker` as a process, between
// the built server and an instant backend (a real HTTP server speaking Ollama's format,
// test/helpers/backends.ts). Measured: jobs/s of one worker with --concurrency 8 under 32
// submitters (target ≥ 500: the worker is never a node's bottleneck), and what the worker adds
// to a job over the backend's own time (target ≤ 2 ms): with one job at a time and a backend
// that takes 20 ms, the worker's time from taking a job to its report, less those 20 ms.
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Pool } from 'undici';
import { ENTRY, freshDatabase, ins, parseBackends, percentile, printRows, ROOT, startServer } from './common.js';
import { startFakeBackend } from '../test/helpers/backends.js';

export interface WorkerBenchOptions {
  duration: number;
  warmup: number;
  backends: string;
  databaseUrl: string;
  submitters: number;
  out: string | undefined;
}

const MODEL = 'bench-worker:latest';
const BACKEND_MS = 20;

/** Resolves once the worker's metrics answer (it started; on a busy machine that takes a while). */
async function metricsUp(url: string): Promise<void> {
  for (const end = Date.now() + 60_000; Date.now() < end; await new Promise((r) => setTimeout(r, 100))) {
    if (
      await fetch(`${url}/metrics`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return;
  }
  throw new Error(`the worker's metrics did not answer on ${url}`);
}

async function scrape(url: string, name: string): Promise<{ sum: number; count: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const get = (suffix: string) => Number(new RegExp(`^${name}_${suffix} ([\\d.e+-]+)$`, 'm').exec(text)?.[1] ?? 0);
  return { sum: get('sum'), count: get('count') };
}

export async function workerScenario(o: WorkerBenchOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  const backend = parseBackends(o.backends)[0]!;
  const db = await freshDatabase(backend, o.databaseUrl, `ins_bench_worker_${process.pid}`);
  const fake = await startFakeBackend('ollama', [MODEL]);
  const rows = [['measure', 'value', 'target']];
  try {
    const key = `nk_${randomBytes(32).toString('base64url')}`;
    const file = path.join(ROOT, 'bench-results', `worker-nodes-${process.pid}.csv`);
    writeFileSync(file, `name,api_key\nbench-worker,${key}\n`);
    await ins(['migrate'], db.env);
    await ins(['import', 'nodes', file], db.env);
    const userKey = (await ins(['key', 'add-user', 'bench'], db.env)).trim();
    const server = await startServer(db.env, 19_500 + (process.pid % 400), path.join(ROOT, 'bench-results', 'server-worker.log'));
    const metricsPort = 19_950 + (process.pid % 40);
    const startWorker = (concurrency: number) =>
      spawn(
        process.execPath,
        [
          ENTRY,
          'worker',
          '--server',
          server.url,
          '--node',
          'bench-worker',
          '--key',
          key,
          '--backend',
          'ollama',
          '--backend-url',
          fake.url,
          '--concurrency',
          String(concurrency),
          '--metrics-port',
          String(metricsPort),
        ],
        { stdio: 'ignore', env: { ...process.env, LOG_LEVEL: 'warn' } },
      );
    const pool = new Pool(server.url, { connections: o.submitters + 4 });
    const cycle = async (): Promise<number> => {
      const t0 = performance.now();
      const sub = await pool.request({
        method: 'POST',
        path: '/submit_job',
        headers: { api_key: userKey, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'bench' }], max_output: 8, temperature: 0 }),
      });
      const { job_id } = (await sub.body.json()) as { job_id: string };
      for (;;) {
        const r = await pool.request({ method: 'GET', path: `/get_result/${job_id}?wait=30`, headers: { api_key: userKey } });
        await r.body.dump();
        if (r.statusCode === 200) return performance.now() - t0;
      }
    };
    const run = async (clients: number, seconds: number) => {
      let done = 0;
      const latencies: number[] = [];
      const end = performance.now() + seconds * 1000;
      await Promise.all(
        Array.from({ length: clients }, async () => {
          while (performance.now() < end) {
            latencies.push(await cycle());
            done++;
          }
        }),
      );
      return { rate: Math.round(done / seconds), latencies: latencies.sort((a, b) => a - b) };
    };
    const stopWorker = async (w: ReturnType<typeof startWorker>) => {
      w.kill('SIGTERM');
      await new Promise((r) => w.once('exit', r));
    };
    try {
      // Throughput: an instant backend, --concurrency 8, 32 submitters.
      const url = `http://127.0.0.1:${metricsPort}`;
      let w = startWorker(8);
      await metricsUp(url);
      await run(o.submitters, o.warmup);
      const throughput = await run(o.submitters, o.duration);
      await stopWorker(w);
      console.log(`   one worker, --concurrency 8, instant backend, ${o.submitters} submitters: ${throughput.rate} jobs/s`);
      rows.push([
        'jobs/s, one worker --concurrency 8, instant backend',
        String(throughput.rate),
        `≥500: ${throughput.rate >= 500 ? 'met' : 'MISSED'}`,
      ]);
      // Overhead: one job at a time, the backend taking BACKEND_MS.
      fake.delayMs = BACKEND_MS;
      w = startWorker(1);
      await metricsUp(url);
      const [jobs0, own0] = [await scrape(url, 'ins_worker_job_seconds'), await scrape(url, 'ins_worker_overhead_seconds')];
      const serial = await run(1, Math.max(5, o.duration / 2));
      const [jobs1, own1] = [await scrape(url, 'ins_worker_job_seconds'), await scrape(url, 'ins_worker_overhead_seconds')];
      await stopWorker(w);
      const perJob = ((jobs1.sum - jobs0.sum) / (jobs1.count - jobs0.count)) * 1000;
      const own = Math.round(((own1.sum - own0.sum) / (own1.count - own0.count)) * 100_000) / 100;
      console.log(
        `   one job at a time, backend ${BACKEND_MS} ms: taken → report answered ${perJob.toFixed(2)} ms; submit→result p50 ${percentile(serial.latencies, 50).toFixed(1)} ms`,
      );
      rows.push([
        `the worker's own time per job (taken → report sent, less the backend's ${BACKEND_MS} ms)`,
        `${own} ms`,
        `≤2: ${own <= 2 ? 'met' : 'MISSED'}`,
      ]);
      rows.push([`taken → report answered, one job at a time (the coordinator's answer included)`, `${perJob.toFixed(2)} ms`, '']);
    } finally {
      await pool.close();
      await server.stop();
    }
  } finally {
    await fake.close();
    await db.cleanup();
  }
  console.log(`\nworker: ${backend}, ${o.duration} s`);
  printRows(rows);
  const out = o.out ?? path.join(ROOT, 'bench-results', `worker-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(out, JSON.stringify({ options: o, rows }, null, 2));
}
