// Runs the real CLI as a child process, for tests of serve, signals, restarts and commands: the
// run's own compile of src/ (test/helpers/build-cli.ts, vitest's globalSetup), or through tsx
// where that did not run; either way no build is needed.
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { until } from './wait.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
/** With INS_TEST_CPU_LOG, each process started logs its CPU at exit (bench/suite-cpu/report.ts). */
const CPU_LOG = process.env.INS_TEST_CPU_LOG ? ['--import', path.join(ROOT, 'bench', 'suite-cpu', 'preload.mjs')] : [];
/** The node arguments that run `ins`. */
export const INS = [
  ...CPU_LOG,
  ...(process.env.INS_TEST_CLI ? [process.env.INS_TEST_CLI] : ['--import', 'tsx', path.join(ROOT, 'src', 'cli', 'entry.ts')]),
];

export function cleanEnv(extra: Record<string, string | undefined>): NodeJS.ProcessEnv {
  // Load-style tests drive one key from one address: rate limits are off unless a test sets them.
  // Verification (a random share of jobs run twice) is off unless a test turns it on, so that
  // tests count exactly the jobs they submit.
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    LOG_LEVEL: 'info',
    VERIFY: 'off',
    RATE_LIMIT_PER_IP: '0',
    RATE_LIMIT_REPORTS_PER_KEY: '0',
    RATE_LIMIT_READS_PER_KEY: '0',
    RATE_LIMIT_COMPLETIONS_PER_USER: '0',
    RATE_LIMIT_CONCURRENT_PER_USER: '0',
  };
  for (const k of ['DATABASE_URL', 'DATA_DIR', 'PORT', 'HOST']) delete env[k];
  for (const [k, v] of Object.entries(extra)) if (v !== undefined) env[k] = v;
  if (CPU_LOG.length) env.INS_TEST_CPU_FILE = expect.getState().testPath ?? '';
  return env;
}

/** Starts `ins worker ARGS`; its log lines (JSON, no terminal) are collected. */
export function startWorkerProcess(args: string[], env: Record<string, string | undefined> = {}): ServerProcess {
  const child = spawn(process.execPath, [...INS, 'worker', ...args], { cwd: ROOT, env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let logs = '';
  child.stdout.on('data', (d: Buffer) => (logs += d.toString()));
  child.stderr.on('data', (d: Buffer) => (logs += d.toString()));
  return { child, url: '', logs: () => logs, exited: ended(child) };
}

/**
 * The exit code, once the process has exited and its output has been read to the end ('close',
 * not 'exit': a process's last lines can still be in the pipe when 'exit' fires, and a test that
 * reads the logs after a stop must find them all).
 */
function ended(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => child.on('close', (code) => resolve(code)));
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function runCli(args: string[], env: Record<string, string | undefined>): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...INS, ...args], { cwd: ROOT, env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Stops `p` with SIGTERM (unless it was signalled already) and answers how it ended: a clean
 * stop is { code: 0, signal: null }. Assert it with the logs as the message, so that a process
 * that died by a signal (a native crash) says which, and what it logged last.
 */
export async function stopped(p: ServerProcess, send = true): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (send) p.child.kill('SIGTERM');
  const code = await p.exited;
  return { code, signal: p.child.signalCode };
}

/** How a process ends cleanly (see stopped()). */
export const CLEAN_EXIT = Object.freeze({ code: 0, signal: null });

export interface ServerProcess {
  child: ChildProcess;
  url: string;
  logs: () => string;
  exited: Promise<number | null>;
}

// A test's server on the embedded database runs for seconds: V8's optimising compiles of PGlite's
// WebAssembly (in background threads) cost more CPU than they give back there, even in the
// suite's busiest server (verification-network.test.ts: 62 s of CPU with Liftoff alone, 69 s
// without). What the server does is the same; a production server keeps V8's tiers
// (src/cli/entry.ts).
const SERVER_FLAGS = ['--liftoff-only'];

/**
 * Starts `ins serve` (on `port`, else a free one) and resolves once /readyz answers 200. A free
 * port can be taken by another process of the suite before the server binds it (seen once in
 * CI): the server then exits saying so, and another free port is tried.
 */
export async function startServerProcess(env: Record<string, string | undefined>, fixedPort?: number): Promise<ServerProcess> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startServerOn(env, fixedPort ?? (await freePort()));
    } catch (err) {
      if (fixedPort !== undefined || attempt >= 5 || !(err instanceof PortTaken)) throw err;
    }
  }
}

class PortTaken extends Error {}

/**
 * Whether process `pid` holds the socket listening on `port` over IPv4 (Linux's /proc/net/tcp
 * and /proc/PID/fd); true where /proc cannot tell.
 */
function listensOn(pid: number, port: number): boolean {
  let table: string;
  try {
    table = readFileSync('/proc/net/tcp', 'utf8');
  } catch {
    return true;
  }
  const local = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  // Columns: sl local_address rem_address st(0A: LISTEN) tx:rx tr:when retrnsmt uid timeout inode
  const inodes = new Set(
    table
      .split('\n')
      .slice(1)
      .map((l) => l.trim().split(/\s+/))
      .filter((f) => f[1]?.endsWith(local) && f[3] === '0A')
      .map((f) => f[9]),
  );
  try {
    return readdirSync(`/proc/${pid}/fd`).some((fd) => {
      try {
        return inodes.has(/^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1]);
      } catch {
        return false; // closed meanwhile
      }
    });
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ENOENT'; // gone: not it; unreadable: /proc cannot tell
  }
}

async function startServerOn(env: Record<string, string | undefined>, port: number): Promise<ServerProcess> {
  const child = spawn(process.execPath, [...SERVER_FLAGS, ...INS, 'serve'], {
    cwd: ROOT,
    env: cleanEnv({ ...env, PORT: String(port), HOST: '127.0.0.1' }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let logs = '';
  child.stdout!.on('data', (d: Buffer) => (logs += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (logs += d.toString()));
  const exited = ended(child);
  const url = `http://127.0.0.1:${port}`;
  // Generous: a loaded machine starts processes slowly; a server that never gets there is killed, not left behind.
  try {
    await until(
      'the server to become ready',
      async () => {
        if (child.exitCode !== null || child.signalCode !== null) {
          await exited; // its last lines (why it exited) read
          if (/port \d+ is already in use/.test(logs)) throw new PortTaken(`server exited early:\n${logs}`);
          throw new Error(`server exited early:\n${logs}`);
        }
        try {
          // Ready, and the one that answered is this child: when the port was taken before the child
          // bound it, the process holding it (another test's server) answers /readyz long before the
          // child gets to listen and exits saying the port is in use.
          return (await fetch(`${url}/readyz`)).status === 200 && listensOn(child.pid!, port);
        } catch {
          return false; // not listening yet
        }
      },
      90_000,
      async () => `\n${logs}`,
    );
  } catch (err) {
    child.kill('SIGKILL'); // (a no-op when it exited)
    throw err;
  }
  return { child, url, logs: () => logs, exited };
}
