// What every benchmark scenario shares: the built CLI, a database of its own for a run
// (PostgreSQL database or embedded data directory, dropped afterwards), and the built server
// started in production mode with the rate limits off (a benchmark would measure its 429s).
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';

export const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
export const ENTRY = path.join(ROOT, 'dist', 'cli', 'entry.js');

export type Backend = 'postgres' | 'pglite';

export function parseBackends(list: string): Backend[] {
  return list
    .split(',')
    .map((b) => b.trim())
    .filter(Boolean)
    .map((b) => {
      if (b !== 'postgres' && b !== 'pglite') throw new Error(`unknown backend ${b}`);
      return b;
    });
}

/** The built CLI of another checkout (e.g. `--baseline DIR`, to compare with the code before a change in one run). */
export const entryOf = (root: string): string => path.join(path.resolve(root), 'dist', 'cli', 'entry.js');

/**
 * `count` nodes named `${prefix}-${i}` with fresh keys, imported with `ins import nodes` (of
 * `entry`, this checkout's by default) into the database of `env`: what every load scenario's
 * workers log in with.
 */
export async function importBenchNodes(
  env: NodeJS.ProcessEnv,
  prefix: string,
  count: number,
  entry = ENTRY,
): Promise<{ name: string; key: string }[]> {
  const nodes = Array.from({ length: count }, (_, i) => ({ name: `${prefix}-${i}`, key: `nk_${randomBytes(32).toString('base64url')}` }));
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  const file = path.join(ROOT, 'bench-results', `${prefix}-nodes-${process.pid}.csv`);
  writeFileSync(file, ['name,api_key', ...nodes.map((n) => `${n.name},${n.key}`)].join('\n'));
  await ins(['import', 'nodes', file], env, entry);
  return nodes;
}

/** The PostgreSQL databases each CLI entry has migrated in this run. */
const migrated = new Set<string>();

/**
 * Runs `ins ARGS` (of `entry`, this checkout's by default); resolves with its stdout, rejects when
 * it fails. On PostgreSQL, `ins migrate` runs first, once per database and entry: only it and
 * `ins serve` migrate one (docs/cli.md), and a fresh run database has no schema yet.
 */
export async function ins(args: string[], env: NodeJS.ProcessEnv, entry = ENTRY): Promise<string> {
  const target = env.DATABASE_URL ? `${env.DATABASE_URL} ${entry}` : undefined;
  if (target && !migrated.has(target) && args[0] !== 'migrate') await ins(['migrate'], env, entry);
  const out = await run(args, env, entry);
  if (target && args[0] === 'migrate') migrated.add(target);
  return out;
}

function run(args: string[], env: NodeJS.ProcessEnv, entry: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [entry, ...args], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`ins ${args.join(' ')} exited ${code}`))));
  });
}

export async function timed(f: () => Promise<unknown>): Promise<number> {
  const t = Date.now();
  await f();
  return (Date.now() - t) / 1000;
}

export interface RunDatabase {
  env: NodeJS.ProcessEnv;
  cleanup: () => Promise<void>;
}

/** A fresh database for one run: a new PostgreSQL database on `databaseUrl`'s server, or a temporary data directory. */
export async function freshDatabase(backend: Backend, databaseUrl: string, name: string): Promise<RunDatabase> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.DATABASE_URL;
  delete env.DATA_DIR;
  if (backend === 'pglite') {
    const dir = mkdtempSync(path.join(tmpdir(), 'ins-bench-'));
    env.DATA_DIR = dir;
    return { env, cleanup: () => Promise.resolve(rmSync(dir, { recursive: true, force: true })) };
  }
  await adminQuery(databaseUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await adminQuery(databaseUrl, `CREATE DATABASE ${name}`);
  // --statement-log (bench/run.ts): PostgreSQL logs every statement's duration in this database
  // only (a setting of the database, no restart), for bench/statement-log.ts to sum by statement.
  if (process.env.BENCH_LOG_STATEMENTS) await adminQuery(databaseUrl, `ALTER DATABASE ${name} SET log_min_duration_statement = 0`);
  env.DATABASE_URL = databaseUrlOf(databaseUrl, name);
  // Made anew: no entry has migrated it yet.
  for (const t of [...migrated]) if (t.startsWith(`${env.DATABASE_URL} `)) migrated.delete(t);
  return {
    env,
    cleanup: async () => {
      await adminQuery(databaseUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}

export function databaseUrlOf(serverUrl: string, name: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** One statement on the server of `url` (names are the bench's own constants). */
export async function adminQuery(url: string, text: string, values: unknown[] = []): Promise<pg.QueryResult> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await c.query(text, values);
  } finally {
    await c.end();
  }
}

export interface Server {
  child: ChildProcess;
  url: string;
  stop: () => Promise<void>;
}

/** The built server (`ins serve` of this checkout, or `entry`: a CLI entry, or the node arguments that start a server). */
export async function startServer(
  env: NodeJS.ProcessEnv,
  port: number,
  logFile: string,
  extraEnv: Record<string, string> = {},
  entry: string | string[] = ENTRY,
): Promise<Server> {
  const log = openSync(logFile, 'w');
  // e.g. BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=bench-results/profiles" to profile the server.
  const nodeArgs = (process.env.BENCH_SERVER_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const child = spawn(process.execPath, [...nodeArgs, ...(Array.isArray(entry) ? entry : [entry, 'serve'])], {
    env: {
      ...env,
      NODE_ENV: 'production',
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      RATE_LIMIT_PER_IP: '0',
      RATE_LIMIT_REPORTS_PER_KEY: '0',
      RATE_LIMIT_READS_PER_KEY: '0',
      RATE_LIMIT_AUTH_FAILURES_PER_IP: '0',
      RATE_LIMIT_COMPLETIONS_PER_USER: '0',
      RATE_LIMIT_CONCURRENT_PER_USER: '0',
      // Thousands of workers poll from this one address (the idle scenario): no long-poll cap either.
      RATE_LIMIT_LONG_POLLS_PER_KEY: '0',
      RATE_LIMIT_LONG_POLLS_PER_IP: '0',
      ...extraEnv,
    },
    stdio: ['ignore', log, log],
  });
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    await once(child, 'exit');
  };
  for (let i = 0; i < 600; i++) {
    if (child.exitCode !== null) throw new Error(`server exited; see ${logFile}`);
    try {
      if ((await fetch(`${url}/readyz`)).ok) return { child, url, stop };
    } catch {
      // starting
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await stop();
  throw new Error('server did not become ready');
}

/** The sum of a metric's series (all labels) in the server's /metrics text. */
export function metricTotal(text: string, name: string): number {
  let n = 0;
  for (const l of text.split('\n')) if (l.startsWith(`${name}{`) || l.startsWith(`${name} `)) n += Number(l.slice(l.lastIndexOf(' ') + 1));
  return n;
}

/** Percentile of sorted numbers (nearest rank). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** Rows as aligned columns. */
/** The mean of runs' figures, to three decimals (NaN for none). */
export const mean = (xs: number[]): number => (xs.length ? Math.round((xs.reduce((a, b) => a + b, 0) / xs.length) * 1000) / 1000 : NaN);

export function printRows(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const r of rows)
    console.log(
      r
        .map((c, i) => c.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    );
}

/**
 * The CPU seconds PostgreSQL's processes have used so far (the postmaster's reaped children and
 * its live ones), when the server of `url` runs on this machine and /proc shows it; undefined
 * otherwise. Compare two readings: what the database spent on the work in between.
 */
export async function postgresCpuSeconds(url: string): Promise<(() => number) | undefined> {
  const stat = (pid: number): string[] | undefined => {
    try {
      const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return text.slice(text.lastIndexOf(')') + 2).split(' ');
    } catch {
      return undefined;
    }
  };
  // Fields after the command: [1] ppid, [11] utime, [12] stime, [13] cutime, [14] cstime (clock
  // ticks). A backend's parent is the postmaster: read while the backend lives.
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  let postmaster: number;
  try {
    const {
      rows: [row],
    } = await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    postmaster = Number(stat(row!.pid)?.[1]);
  } finally {
    await c.end();
  }
  if (!postmaster || !stat(postmaster)) return undefined;
  const ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  return () => {
    const own = stat(postmaster);
    let t = Number(own?.[11]) + Number(own?.[12]) + Number(own?.[13]) + Number(own?.[14]);
    for (const child of readFileSync(`/proc/${postmaster}/task/${postmaster}/children`, 'utf8').trim().split(' ').filter(Boolean)) {
      const s = stat(Number(child));
      if (s) t += Number(s[11]) + Number(s[12]);
    }
    return t / ticks;
  };
}
