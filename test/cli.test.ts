// The `ins` command line against a real embedded data directory, alone and while the server
// runs (commands are then forwarded to it over the admin socket).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { parseCommand } from '../src/cli/commands.js';
import { forwardToServer } from '../src/cli/forward.js';
import { loadConfig } from '../src/config.js';
import { lockPath } from '../src/db/data-dir-lock.js';
import { startServer } from '../src/server.js';
import { CLEAN_EXIT, freePort, runCli, startServerProcess, stopped } from './helpers/process.js';

const dir = mkdtempSync(path.join(tmpdir(), 'ins-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const env = { DATA_DIR: path.join(dir, 'data') };
const ins = (...args: string[]) => runCli(args, env);

// Each test starts several `ins` processes in a row, each opening the embedded database: minutes
// on a loaded machine (seconds on a quiet one), and one timing out leaves its process holding
// the data directory for the next test.
describe('ins', { timeout: 240_000 }, () => {
  it('prints usage with --help (exit 0) and without a command (exit 2)', async () => {
    const help = await ins('--help');
    expect(help.code).toBe(0);
    for (const c of [
      'serve',
      'migrate',
      'node add NAME',
      'node rotate-key NAME',
      'key add-reader LABEL',
      'key revoke',
      'model set-points MODEL POINTS',
      'DATABASE_URL',
    ]) {
      expect(help.stdout).toContain(c);
    }
    expect((await ins()).code).toBe(2);
    const sub = await ins('node', 'add', '--help');
    expect(sub.code).toBe(0);
    expect(sub.stdout).toContain('usage: ins node add NAME');
    // A group's --help lists its commands.
    const group = await ins('node', '--help');
    expect(group.code).toBe(0);
    for (const c of ['ins node add NAME', 'ins node list', 'ins node disable NAME', 'ins node rotate-key NAME']) expect(group.stdout).toContain(c);
  });

  it("answers a group without its command, or with an unknown one, with the group's commands (exit 2)", () => {
    expect(() => parseCommand(['import'])).toThrow(
      /^"import" takes one of:\n {2}ins import nodes FILE\.csv[\s\S]*ins import results FILE\.csv[\s\S]*\(ins import --help\)$/,
    );
    expect(() => parseCommand(['import', 'bogus', 'x.csv'])).toThrow(/^unknown command "import bogus"; "import" takes one of:/);
    expect(() => parseCommand(['nope', 'x'])).toThrow(/^unknown command "nope x"$/);
    expect(parseCommand(['key', '-h'])).toMatchObject({ help: true, command: { usage: 'key COMMAND' } });
  });

  it('rejects bad arguments with exit 2 and a message, changing nothing', async () => {
    const said: string[] = [];
    for (const args of [
      ['node', 'add'],
      ['node', 'add', 'a', 'b'],
      ['nodes'],
      ['node', 'list', '--colour'],
      ['model', 'set-points', 'm', '-1'],
      ['model', 'set-points', 'm', 'lots'],
      ['model', 'set-points', 'm', '0.1234567890123456789'],
      ['node', 'add', 'x'.repeat(129)],
    ]) {
      const r = await ins(...args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/^ins: /);
      said.push(r.stderr);
    }
    for (const args of [
      ['model', 'list', '--json'],
      ['node', 'list', '--json'],
    ]) {
      const r = await ins(...args);
      expect(JSON.parse(r.stdout)).toEqual([]);
      said.push(r.stderr);
    }
    // The first command that opened the database made the data directory, and said where (run
    // elsewhere, it would not be the server's); no other says it.
    expect(said.filter((e) => e.includes(`ins: made a new embedded database in ${env.DATA_DIR} (DATA_DIR;`))).toHaveLength(1);
  });

  it('manages nodes: add prints the key once, duplicates and unknown names fail with exit 1', async () => {
    const add = await ins('node', 'add', 'rig-01');
    expect(add.code).toBe(0);
    expect(add.stdout.trim()).toMatch(/^nk_[A-Za-z0-9_-]{43}$/);
    expect(add.stderr).toContain('shown only once');
    const json = JSON.parse((await ins('node', 'add', 'rig-02', '--json')).stdout);
    expect(json).toEqual({ name: 'rig-02', key: expect.stringMatching(/^nk_/) });
    expect((await ins('node', 'add', 'rig-01')).code).toBe(1);
    expect((await ins('node', 'disable', 'nobody')).code).toBe(1);
    expect((await ins('node', 'disable', 'rig-02')).code).toBe(0);
    const list = JSON.parse((await ins('node', 'list', '--json')).stdout);
    expect(list.map((n: { name: string; disabled: boolean }) => [n.name, n.disabled])).toEqual([
      ['rig-01', false],
      ['rig-02', true],
    ]);
    expect((await ins('node', 'enable', 'rig-02')).code).toBe(0);
    const human = await ins('node', 'list');
    expect(human.stdout).toMatch(/NAME\s+STATUS/);
    expect(human.stdout).not.toContain('nk_');
  });

  it('manages reader keys and model points', async () => {
    const reader = await ins('key', 'add-reader', 'grafana');
    expect(reader.stdout.trim()).toMatch(/^rk_/);
    const keys = JSON.parse((await ins('key', 'list', '--json')).stdout);
    expect(keys).toEqual([expect.objectContaining({ id: 1, label: 'grafana', revoked: false })]);
    expect((await ins('key', 'list')).stdout).not.toContain('rk_');
    expect((await ins('key', 'revoke', 'grafana')).code).toBe(0);
    expect((await ins('key', 'revoke', '99')).code).toBe(1);
    // A model nobody has declared yet may be priced ahead, with a note (a misspelt name is seen).
    const first = await ins('model', 'set-points', 'llama3.2:latest', '2.5');
    expect(first.code).toBe(0);
    expect(first.stderr).toMatch(/"llama3\.2:latest" is a new model/);
    expect(JSON.parse((await ins('model', 'list', '--json')).stdout)).toEqual([{ name: 'llama3.2:latest', points_per_job: 2.5, nodes: 0 }]);
    const reset = await ins('model', 'set-points', 'llama3.2:latest', 'default', '--json');
    expect(reset.code).toBe(0);
    expect(reset.stderr).toBe('');
    expect(JSON.parse(reset.stdout)).toEqual({ model: 'llama3.2:latest', points_per_job: null, created: false });
  });

  it('says what to do when a server holds the database but does not answer on its socket', async () => {
    const busy = { DATA_DIR: path.join(dir, 'busy') };
    expect((await runCli(['node', 'list'], busy)).code).toBe(0);
    // A live process (this one) holds the lock as a server that has not opened its socket yet.
    writeFileSync(lockPath(busy.DATA_DIR), JSON.stringify({ pid: process.pid, purpose: 'server' }));
    const r = await runCli(['node', 'add', 'late'], busy);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`in use by process ${process.pid} (server)`);
    expect(r.stderr).toContain('admin.sock');
    expect(r.stderr).toContain('/healthz');
  });

  it('opens the admin socket before the port listens', async () => {
    const dataDir = path.join(dir, 'early');
    const port = await freePort();
    const config = loadConfig({ DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'silent', VERIFY: 'off' });
    let listeningAtHook: boolean | undefined;
    const server = await startServer(config, pino({ level: 'silent' }), {
      beforeListen: async () => {
        listeningAtHook = await fetch(`http://127.0.0.1:${port}/healthz`).then(
          () => true,
          () => false,
        );
        return undefined;
      },
    });
    try {
      expect(listeningAtHook).toBe(false);
      expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it('works while the server runs: the command is forwarded and the new key works at once', async () => {
    const server = await startServerProcess(env);
    try {
      // The socket answers as soon as the server does (ins serve opens it before listening).
      expect((await forwardToServer(env.DATA_DIR, ['node', 'list', '--json']))?.code).toBe(0);
      // A relative FILE is read from the caller's directory, not the server's.
      writeFileSync(path.join(dir, 'nodes.csv'), `name,api_key_sha256\nimported-rig,${'ab'.repeat(32)}\n`);
      const imported = await forwardToServer(env.DATA_DIR, ['import', 'nodes', 'nodes.csv', '--json'], dir);
      expect(imported?.code, JSON.stringify(imported)).toBe(0);
      expect(JSON.parse(imported!.stdout[0]!)).toMatchObject({ imported: 1 });
      // A malformed file is the caller's mistake, said as without a server (not "see its log").
      writeFileSync(path.join(dir, 'bad.csv'), 'foo,bar\nx,y\n');
      const bad = await forwardToServer(env.DATA_DIR, ['import', 'nodes', 'bad.csv'], dir);
      expect(bad?.code).toBe(1);
      expect(bad?.stderr.join('\n')).toMatch(
        /bad\.csv: line 1: expected the columns name,api_key or name,api_key_sha256; got foo,bar; nothing was imported/,
      );
      const add = await ins('node', 'add', 'hot-added');
      expect(add.code).toBe(0);
      const key = add.stdout.trim();
      const res = await fetch(`${server.url}/worker/update_result`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ job_id: 'hot-1', api_key: key, model_name: 'm', result: {}, status: 'success' }),
      });
      expect(res.status).toBe(200);
      expect((await ins('node', 'add', 'hot-added')).code).toBe(1);
      expect((await ins('node', 'add')).code).toBe(2);
      const rotated = (await ins('node', 'rotate-key', 'hot-added')).stdout.trim();
      const old = await fetch(`${server.url}/worker/update_result`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ job_id: 'hot-2', api_key: key, model_name: 'm', result: {}, status: 'success' }),
      });
      expect(old.status).toBe(401);
      expect(rotated).toMatch(/^nk_/);
    } finally {
      expect(await stopped(server), server.logs()).toEqual(CLEAN_EXIT);
    }
  });
});
