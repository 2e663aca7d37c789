// Verification against real worker processes (`ins worker`) and backends that are real HTTP
// servers speaking Ollama's wire (test/helpers/backends.ts), on both backends. Four honest
// nodes whose answers vary a little (test/helpers/behaviours.ts noisy) serve three models; a
// lazy node (one canned text) serves the first, a replayer (earlier answers, whitespace
// jittered) the second, an implausibly fast node (long answers at once) the third. Over 2,000 jobs: each cheat is
// suspended within 20 of its jobs and keeps 0 points, no honest node is suspended, every user
// job is done exactly once, and every aggregate equals its recomputation.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sql, type Database } from '../src/db/database.js';
import { openPglite } from '../src/db/pglite.js';
import { openPostgres } from '../src/db/pg.js';
import { createPostgresDatabase, TEST_DATABASE_URL } from './helpers/db.js';
import { CLEAN_EXIT, runCli, startServerProcess, startWorkerProcess, type ServerProcess, stopped } from './helpers/process.js';
import { startFakeBackend, type AnswerFn, type FakeBackend } from './helpers/backends.js';
import { canned, honest, noisy, replayer } from './helpers/behaviours.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { until } from './helpers/wait.js';

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

const targets = [
  {
    name: 'embedded PGlite',
    env: async () => {
      const dir = mkdtempSync(path.join(tmpdir(), 'ins-verify-'));
      cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
      return { env: { DATA_DIR: dir }, open: () => openPglite(dir) };
    },
  },
  ...(TEST_DATABASE_URL
    ? [
        {
          name: 'PostgreSQL',
          env: async () => {
            const { url, drop } = await createPostgresDatabase();
            cleanups.push(drop);
            return { env: { DATABASE_URL: url }, open: async (): Promise<Database> => openPostgres({ connectionString: url, max: 2 }) };
          },
        },
      ]
    : []),
];

const MODELS = ['model-a', 'model-b', 'model-c'];
const JOBS = 2_000;

describe.each(targets)('verification with real workers on $name', (target) => {
  it('suspends the lazy, the replaying and the too fast within 20 of their jobs, at 0 points, and no honest node', { timeout: 300_000 }, async () => {
    const { env: dbEnv, open } = await target.env();
    const env = { ...dbEnv, VERIFY: 'on', VERIFY_SHARE: '0.2', VERIFY_PROBE_INTERVAL: '2s', SWEEP_INTERVAL: '200ms', LOG_LEVEL: 'warn' };
    const nodes: { name: string; answer: AnswerFn; models: string[]; delayMs: number; concurrency: number }[] = [
      ...[1, 2, 3, 4].map((i) => ({ name: `honest-${i}`, answer: noisy(0.1), models: MODELS, delayMs: 80, concurrency: 4 })),
      { name: 'lazy', answer: canned, models: ['model-a'], delayMs: 80, concurrency: 1 },
      { name: 'replayer', answer: replayer(), models: ['model-b'], delayMs: 80, concurrency: 1 },
      // Right answers, sixteen times as long as the others, at once: no GPU writes 800 words in a few
      // ms. The speed check divides by the lease's time, which on a loaded machine is the worker's
      // and the server's turn-around (25-190 ms beside two busy cores, more in the whole suite):
      // 800 words stay above the cap up to about 0.8 s of it, where 200 (four times) did only up
      // to 0.2 s, and the node took 38 jobs before its third strike in one such run.
      { name: 'fast', answer: ((m, msgs) => Array(16).fill(honest(m, msgs)).join(' ')) as AnswerFn, models: ['model-c'], delayMs: 0, concurrency: 1 },
    ];
    // The server first: on the embedded database the keys' commands are then forwarded to it
    // over its admin socket rather than each opening the database (about 0.1 s of CPU each, not 0.6).
    const server: ServerProcess = await startServerProcess(env);
    const workers: ServerProcess[] = [];
    const backends: FakeBackend[] = [];
    cleanups.push(async () => {
      for (const w of workers) if (w.child.exitCode === null) w.child.kill('SIGKILL');
      for (const b of backends) await b.close();
      if (server.child.exitCode === null) server.child.kill('SIGKILL');
    });
    const keys = new Map<string, string>();
    for (const n of nodes) keys.set(n.name, (await runCli(['node', 'add', n.name], env)).stdout.trim());
    const userKey = (await runCli(['key', 'add-user', 'app'], env)).stdout.trim();
    const readerKey = (await runCli(['key', 'add-reader', 'audit'], env)).stdout.trim();
    const api = async <T>(p: string, init: RequestInit = {}): Promise<{ status: number; body: T }> => {
      const res = await fetch(`${server.url}${p}`, { ...init, headers: { 'content-type': 'application/json', api_key: userKey, ...init.headers } });
      return { status: res.status, body: (await res.json()) as T };
    };
    for (const n of nodes) {
      const b = await startFakeBackend('ollama', n.models);
      b.answer = n.answer;
      b.delayMs = n.delayMs;
      backends.push(b);
      workers.push(
        startWorkerProcess(
          ['--server', server.url, '--node', n.name, '--backend', 'ollama', '--backend-url', b.url, '--concurrency', String(n.concurrency)],
          { INS_NODE_KEY: keys.get(n.name)! },
        ),
      );
    }
    for (const w of workers)
      await until(
        'a worker to declare its models',
        () => w.logs().includes('models declared'),
        30_000,
        async () => `\n${w.logs()}`,
      );

    // The users' jobs, at temperature 0 (the ones worth checking), each prompt its own.
    const ids: string[] = [];
    for (let i = 0; i < JOBS; i += 50) {
      ids.push(
        ...(await Promise.all(
          Array.from({ length: 50 }, async (_, k) => {
            const n = i + k;
            const res = await api<{ job_id: string }>('/submit_job', {
              method: 'POST',
              body: JSON.stringify({
                model: MODELS[n % 3],
                messages: [{ role: 'user', content: `Question ${n}: what is worth knowing about the number ${n * 7}?` }],
                max_output: 128,
                temperature: 0,
              }),
            });
            expect(res.status).toBe(200);
            return res.body.job_id;
          }),
        )),
      );
    }
    const states = new Map<string, string>();
    for (let i = 0; i < ids.length; i += 100) {
      await Promise.all(
        ids.slice(i, i + 100).map(async (id) => {
          for (;;) {
            const r = await api<{ status: string }>(`/get_result/${id}?wait=20`);
            if (r.status === 200) return states.set(id, r.body.status);
          }
        }),
      );
    }
    expect([...states.values()].every((s) => s === 'success')).toBe(true);
    // Copies and probes finish, and every done job is audited.
    // From /metrics, which count copies and probes too (total_job_count counts the users' jobs alone).
    const metrics = async () => {
      const lines = (await (await fetch(`${server.url}/metrics`)).text()).split('\n');
      const sum = (prefix: string) => lines.filter((l) => l.startsWith(prefix)).reduce((a, l) => a + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
      return {
        queued: sum('ins_jobs_queued{'),
        leased: sum('ins_job_leases_open '),
        done: sum('ins_jobs_finished_total{state="done"} '),
        audited: sum('ins_verification_total{event="audited"} '),
      };
    };
    let m!: Awaited<ReturnType<typeof metrics>>;
    await until(
      'the jobs to settle',
      async () => {
        m = await metrics();
        return !m.queued && !m.leased && m.audited >= m.done;
      },
      60_000,
      async () => JSON.stringify(m),
    );

    const listed = JSON.parse((await runCli(['node', 'list', '--json'], env)).stdout) as { name: string; standing: string }[];
    const standing = Object.fromEntries(listed.map((n) => [n.name, n.standing]));
    expect(standing).toMatchObject({ lazy: 'suspended', replayer: 'suspended', fast: 'suspended' });
    for (const i of [1, 2, 3, 4]) expect(standing[`honest-${i}`]).not.toBe('suspended');
    for (const cheat of ['lazy', 'replayer', 'fast']) {
      const points = await api<{ pointsraw: number }>(`/get_points?node_name=${cheat}`, { headers: { api_key: readerKey } });
      expect(points.body.pointsraw, cheat).toBe(0);
      const audit = JSON.parse((await runCli(['node', 'audit', cheat, '--json'], env)).stdout) as { strikes: { kind: string }[] };
      expect(
        audit.strikes.map((s) => s.kind),
        cheat,
      ).toContain(cheat === 'fast' ? 'too_fast' : 'replay');
    }
    expect(await stopped(server), server.logs()).toEqual(CLEAN_EXIT);

    // What the database holds, once the server is gone.
    const db = await open();
    try {
      const q = <T>(name: string, text: string) => db.query<T>(sql(name, text));
      // Each cheat's leases up to its suspension.
      const before = await q<{ name: string; jobs: number }>(
        't_leases_before',
        `SELECT n.name, count(l.*)::int AS jobs FROM nodes n
        JOIN node_standing s ON s.node_id = n.id AND s.state = 'suspended' LEFT JOIN job_leases l ON l.node_id = n.id AND l.leased_at <= s.changed_at
        GROUP BY n.name ORDER BY n.name`,
      );
      console.log(`${target.name}: jobs of each cheat up to its suspension`, before);
      expect(before.map((b) => b.name)).toEqual(['fast', 'lazy', 'replayer']);
      for (const b of before) expect(b.jobs, b.name).toBeLessThanOrEqual(20);
      const [jobs] = await q<{ user_done: number; extra: number; strikes_honest: number }>(
        't_jobs',
        `SELECT
        (SELECT count(*)::int FROM jobs WHERE kind = 'user' AND state = 'done') AS user_done,
        (SELECT count(*)::int FROM jobs WHERE kind <> 'user') AS extra,
        (SELECT count(*)::int FROM node_strikes k JOIN nodes n ON n.id = k.node_id WHERE n.name LIKE 'honest-%') AS strikes_honest`,
      );
      console.log(`${target.name}: ${jobs!.user_done} user jobs, ${jobs!.extra} copies and probes, ${jobs!.strikes_honest} strikes on honest nodes`);
      expect(jobs!.user_done).toBe(JOBS);
      // Every success credited once: points are the successes left.
      const [credit] = await q<{ points: number; successes: number; done: number }>(
        't_credit',
        `SELECT
        (SELECT coalesce(sum(points), 0)::float8 FROM node_daily_points) AS points,
        (SELECT count(*)::int FROM job_results WHERE status = 'success') AS successes,
        (SELECT count(*)::int FROM jobs WHERE state = 'done' AND NOT EXISTS (SELECT 1 FROM point_reversals r WHERE r.job_id = jobs.id::text)) AS done`,
      );
      expect(credit!.points).toBe(credit!.successes);
      expect(credit!.successes).toBe(credit!.done);
      const { stored, recomputed } = await aggregatesAndRecomputation(db);
      expect(stored).toEqual(recomputed);
    } finally {
      await db.close();
    }
  });
});
