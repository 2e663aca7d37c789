// The server as a process: configuration errors, graceful SIGTERM with a request in flight,
// logs without secrets, a port in use, the embedded data directory guarded against a second
// server, and `npm start` (the README's quickstart) stopping with its server.
import { spawn } from 'node:child_process';
import { EventEmitter, once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { CLEAN_EXIT, cleanEnv, freePort, INS, ROOT, runCli, startServerProcess, stopped } from './helpers/process.js';
import { createPostgresDatabase, TEST_DATABASE_URL } from './helpers/db.js';
import { lockDataDir } from '../src/db/data-dir-lock.js';

const dir = mkdtempSync(path.join(tmpdir(), 'ins-server-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('ins serve', () => {
  it('refuses invalid configuration with one line per problem and exit 1', async () => {
    const r = await runCli(['serve'], { PORT: 'eighty', LOG_LEVEL: 'loud', DATABASE_URL: 'mysql://x', BODY_LIMIT: '12 parsecs' });
    expect(r.code).toBe(1);
    for (const name of ['PORT', 'LOG_LEVEL', 'DATABASE_URL', 'BODY_LIMIT']) expect(r.stderr).toContain(`- ${name}`);
  });

  it('says why it cannot start when the database is out of reach or DATA_DIR unusable: one line, no stack, exit 1', async () => {
    const unreachable = await runCli(['serve'], { DATABASE_URL: 'postgresql://postgres@127.0.0.1:1/nothing' });
    expect(unreachable.code).toBe(1);
    expect(unreachable.stdout).toContain('could not start: cannot use the PostgreSQL database of DATABASE_URL (connect ECONNREFUSED 127.0.0.1:1)');
    const file = path.join(dir, 'a-file');
    writeFileSync(file, 'not a directory');
    const notDir = await runCli(['serve'], { DATA_DIR: file });
    expect(notDir.code).toBe(1);
    expect(notDir.stdout).toContain(`could not start: cannot use DATA_DIR=${file} for the embedded database`);
    // Other commands say the same, naming the setting; ledger verify names the URL it could not reach.
    const listUnreachable = await runCli(['node', 'list'], { DATABASE_URL: 'postgresql://postgres@127.0.0.1:1/nothing' });
    expect(listUnreachable.code).toBe(1);
    expect(listUnreachable.stderr).toContain('ins: cannot use the PostgreSQL database of DATABASE_URL (connect ECONNREFUSED 127.0.0.1:1)');
    // A script that asked for JSON gets JSON for the failure too.
    const listJson = await runCli(['node', 'list', '--json'], { DATABASE_URL: 'postgresql://postgres@127.0.0.1:1/nothing' });
    expect(listJson.code).toBe(1);
    expect(JSON.parse(listJson.stdout)).toEqual({ error: expect.stringContaining('cannot use the PostgreSQL database of DATABASE_URL') });
    const listNotDir = await runCli(['node', 'list'], { DATA_DIR: file });
    expect(listNotDir.code).toBe(1);
    expect(listNotDir.stderr).toContain(`ins: cannot use DATA_DIR=${file} for the embedded database`);
    // A DATA_DIR under /proc: Node's recursive mkdir spun there for ever, deaf to SIGTERM.
    const inProc = await runCli(['node', 'list'], { DATA_DIR: '/proc/ins-test-data' });
    expect(inProc.code).toBe(1);
    expect(inProc.stderr).toContain(
      "ins: cannot use DATA_DIR=/proc/ins-test-data for the embedded database (ENOENT: no such file or directory, mkdir '/proc/ins-test-data')",
    );
    const closed = String(await freePort());
    const verify = await runCli(['ledger', 'verify', '--server', `http://127.0.0.1:${closed}`], {});
    expect(verify.code).toBe(1);
    expect(verify.stderr).toContain(`ins ledger verify: cannot reach http://127.0.0.1:${closed} (connect ECONNREFUSED 127.0.0.1:${closed})`);
    for (const out of [unreachable, notDir, listUnreachable, listNotDir, inProc, verify])
      expect(out.stdout + out.stderr).not.toMatch(/\bat .*\(.*:\d+:\d+\)|"stack"/);
  });

  it('says so in one line, without a stack, when LEDGER_KEY_FILE cannot be a key or the database is not migrated', async () => {
    const port = String(await freePort());
    const badKey = await runCli(['serve'], {
      PORT: port,
      DATA_DIR: path.join(dir, 'ledger-key'),
      LEDGER_KEY_FILE: path.join(dir, 'no-such-dir', 'k.pem'),
    });
    expect(badKey.code).toBe(1);
    expect(badKey.stdout).toContain(`could not start: LEDGER_KEY_FILE ${path.join(dir, 'no-such-dir', 'k.pem')}: cannot create it`);
    const outs = [badKey];
    if (TEST_DATABASE_URL) {
      const { url, drop } = await createPostgresDatabase();
      onTestFinished(drop);
      for (const [args, env] of [
        [['serve', '--no-migrate'], {}],
        [['serve'], { MIGRATE_ON_START: 'false' }],
      ] as const) {
        const empty = await runCli([...args], { PORT: port, DATABASE_URL: url, ...env });
        expect(empty.code).toBe(1);
        expect(empty.stdout).toContain('could not start: the database is not migrated');
        expect(empty.stdout).toContain('run `ins migrate`');
        // Nothing else was tried first: one line of failure.
        expect(empty.stdout.split('\n').filter((l) => /"level":(50|60)/.test(l))).toHaveLength(1);
        outs.push(empty);
      }
      // Nor does any other command migrate it: only `ins migrate` and `ins serve` change a schema.
      const list = await runCli(['node', 'list'], { DATABASE_URL: url, MIGRATE_ON_START: 'true' });
      expect(list.code).toBe(1);
      expect(list.stderr).toMatch(
        /^ins: the database of DATABASE_URL is not migrated \(\d+ migrations pending, the first 0001_[a-z_]+\): run `ins migrate`/,
      );
      const admin = new pg.Client({ connectionString: url });
      await admin.connect();
      const tables = await admin.query("SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'");
      await admin.end();
      expect(tables.rows).toEqual([{ n: 0 }]);
      expect((await runCli(['migrate'], { DATABASE_URL: url })).code).toBe(0);
      expect(await runCli(['node', 'list'], { DATABASE_URL: url })).toMatchObject({ code: 0 });
      outs.push(list);
    }
    for (const out of outs) expect(out.stdout + out.stderr).not.toMatch(/\bat .*\(.*:\d+:\d+\)|"stack"/);
  });

  it('finishes a request in flight on SIGTERM, then exits 0; keys and results stay out of the log', async () => {
    const env = { DATA_DIR: path.join(dir, 'graceful') };
    const key = (await runCli(['node', 'add', 'graceful'], env)).stdout.trim();
    const server = await startServerProcess(env);
    // /readyz answered; the line logged just before may still be in the pipe.
    await expect.poll(() => server.logs()).toContain('listening on');
    expect(server.logs()).toContain('embedded PGlite');

    const body = JSON.stringify({ job_id: 'in-flight', api_key: key, model_name: 'm', result: { message: 'very secret output' }, status: 'success' });
    const { port } = new URL(server.url);
    const socket = net.connect(Number(port), '127.0.0.1');
    socket.on('error', () => undefined); // a reset shows as a missing response below
    await new Promise((r) => socket.once('connect', r));
    let response = '';
    const data = new EventEmitter();
    socket.on('data', (d: Buffer) => {
      response += d.toString();
      data.emit('data');
    });
    const closed = new Promise((r) => socket.once('close', r));
    // Headers and half the body, then the signal, then the rest. `Expect: 100-continue` makes
    // the server say when it has the request in hand: the signal comes after that, never
    // while the request is still unread in the socket's buffer.
    socket.write(
      `POST /worker/update_result HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n${body.slice(0, 20)}`,
    );
    while (!response.includes('100 Continue')) await once(data, 'data');
    server.child.kill('SIGTERM');
    await expect.poll(() => server.logs(), { timeout: 30_000, interval: 20 }).toContain('shutting down');
    socket.write(body.slice(20));
    await closed;
    expect(response).toMatch(/^HTTP\/1.1 100 Continue\r\n\r\nHTTP\/1.1 200/);
    expect(response).toContain('"points":1');
    expect(await stopped(server, false), server.logs()).toEqual(CLEAN_EXIT);
    const logs = server.logs();
    expect(logs).toContain('"signal":"SIGTERM"');
    expect(logs).toContain('"route":"/worker/update_result"');
    expect(logs).toContain('"node":"graceful"');
    expect(logs).not.toContain(key);
    expect(logs).not.toContain(key.slice(3, 20));
    expect(logs).not.toContain('very secret output');
  });

  it("stops and exits 0 on SIGTERM when its log's reader has gone (`ins serve | head`, a log shipper that died)", async () => {
    const server = await startServerProcess({ DATA_DIR: path.join(dir, 'reader-gone') });
    onTestFinished(() => {
      if (server.child.exitCode === null) server.child.kill('SIGKILL');
    });
    // The read ends of its stdout and stderr closed: each line it writes now is EPIPE. Requests
    // while it stops, so that lines are being written when it exits (sonic-boom's synchronous
    // flush at exit retried a failed write for ever: the process never exited).
    server.child.stdout!.destroy();
    server.child.stderr!.destroy();
    const requests = Array.from({ length: 20 }, () => fetch(`${server.url}/healthz`).catch(() => undefined));
    expect(await stopped(server)).toEqual(CLEAN_EXIT);
    await Promise.all(requests);
  });

  it('stops cleanly on a SIGTERM that comes while it starts: the start completes, then it stops and exits 0', async () => {
    const child = spawn(process.execPath, [...INS, 'serve'], {
      cwd: ROOT,
      env: cleanEnv({ DATA_DIR: path.join(dir, 'early'), PORT: '0' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const closed = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.once('close', (code, signal) => resolve([code, signal])));
    // 'starting' comes before the database is opened (about a second of PGlite): the signal lands in the start.
    await expect.poll(() => out, { timeout: 60_000 }).toContain('"msg":"starting"');
    child.kill('SIGTERM');
    expect(await closed, out).toEqual([0, null]);
    expect(out).toContain('"msg":"the signal came while starting"');
    expect(out).toContain('"msg":"stopped"');
  });

  it("refuses a port in use, with the reason; the tests' helper does not take the first server for the second", async () => {
    const first = await startServerProcess({ DATA_DIR: path.join(dir, 'port-first') });
    try {
      // The first answers /readyz on that port all along: the helper waits for the second itself, which exits.
      const second = startServerProcess({ DATA_DIR: path.join(dir, 'port-second') }, Number(new URL(first.url).port));
      await expect(second).rejects.toThrow(/server exited early:[\s\S]*port \d+ is already in use/);
    } finally {
      first.child.kill('SIGTERM');
      await first.exited;
    }
  });

  it('refuses a second server on the same data directory, with the reason', async () => {
    const env = { DATA_DIR: path.join(dir, 'single') };
    const first = await startServerProcess(env);
    try {
      const second = await runCli(['serve'], { ...env, PORT: '0' });
      expect(second.code).toBe(1);
      expect(second.stdout + second.stderr).toMatch(/in use by process \d+ \(server\).*already running/);
    } finally {
      first.child.kill('SIGTERM');
      await first.exited;
    }
  });

  /** `ins serve` on a data directory this process holds as an `ins` command would (`ins ledger verify`, for seconds). */
  const serveBesideHeldLock = async (name: string) => {
    const dataDir = path.join(dir, name);
    mkdirSync(dataDir, { recursive: true });
    const release = lockDataDir(dataDir, 'ins ledger verify');
    const child = spawn(process.execPath, [...INS, 'serve'], {
      cwd: ROOT,
      env: cleanEnv({ DATA_DIR: dataDir, PORT: String(await freePort()) }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    let released = false;
    return {
      child,
      exited: once(child, 'close'),
      out: () => out,
      release: () => {
        if (!released) release();
        released = true;
      },
      cleanup: () => {
        if (!released) release();
        if (child.exitCode === null) child.kill('SIGKILL');
      },
    };
  };

  it('waits for an ins command that holds the embedded database, then starts (another server it does not wait for)', async () => {
    const s = await serveBesideHeldLock('held');
    try {
      await expect.poll(s.out, { timeout: 60_000 }).toContain('(ins ledger verify): waiting for it to finish');
      s.release();
      await expect.poll(s.out, { timeout: 60_000 }).toContain('"msg":"listening on');
      s.child.kill('SIGTERM');
      expect(await s.exited).toEqual([0, null]);
    } finally {
      s.cleanup();
    }
  });

  it('stops at once, exit 0, on a SIGTERM that comes while it waits for an ins command (docker stop must not wait 30 s)', async () => {
    const s = await serveBesideHeldLock('held-stop');
    try {
      await expect.poll(s.out, { timeout: 60_000 }).toContain('waiting for it to finish');
      s.child.kill('SIGTERM');
      // Still held when it exits: the wait ended on the signal, not on the lock.
      expect(await s.exited).toEqual([0, null]);
      expect(s.out()).toContain('nothing was started');
    } finally {
      s.cleanup();
    }
  });

  // npm runs the script through sh; without `exec` the shell stays between them, npm's SIGTERM
  // stops at the shell, and the server, orphaned, keeps the port (seen: a harness that stops
  // `npm start` and starts it again finds :8000 taken). The build (prestart) is npm ci's.
  it('npm start: SIGTERM to npm reaches ins serve, which stops cleanly, and npm exits 0', { timeout: 120_000 }, async () => {
    const port = await freePort();
    const child = spawn('npm', ['start', '--ignore-scripts', '--silent'], {
      cwd: ROOT,
      env: cleanEnv({ DATA_DIR: path.join(dir, 'npm-start'), PORT: String(port) }),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const closed = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
    // Whatever the outcome, a time-out included, nothing of it outlives the test (npm, a shell, a server: one group).
    onTestFinished(() => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    });
    await expect.poll(() => out, { timeout: 90_000 }).toContain('listening on');
    child.kill('SIGTERM');
    // 'close': npm exited and every holder of its output, the server too, is gone.
    expect(await closed, out).toBe(0);
    expect(out).toContain('"msg":"stopped"');
  });
});
