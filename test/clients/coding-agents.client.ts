// Issue 54: Claude Code and Codex, the real clients, as a user runs them headless against the
// network (docs/anthropic.md, docs/responses.md): `claude -p` with ANTHROPIC_BASE_URL and a user
// key, `codex exec` with a model provider whose wire_api is "responses". Each answers a prompt
// through real `ins worker`s on test backends of both kinds (Ollama's wire, vLLM's), and runs
// one tool round trip: the node's answer calls the client's shell tool, the client runs it and
// sends its output back, and the node's next answer (its echo of that output) is printed.
//
// The clients are native binaries of ~250-320 MB in npm packages, so they are not dev
// dependencies: `npm run test:clients` installs the pinned versions into .clients/ first
// (scripts/clients/install.sh), and CI runs it as a step of its own. Nothing they do leaves this
// machine: the throwaway HOME and the settings below turn off their telemetry, updates and
// plugins (checked with strace when this was written: only 127.0.0.1 is connected to).
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backends } from '../helpers/db.js';
import { startNetwork, type TestNetwork } from '../helpers/network.js';

const BIN = resolve(process.env.CLIENTS_DIR ?? '.clients', 'node_modules', '.bin');
const CLAUDE = join(BIN, 'claude');
const CODEX = join(BIN, 'codex');
const KINDS = ['ollama', 'vllm'] as const;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a client with nothing of this process's environment but PATH, in a throwaway HOME, its stdin closed. */
function run(bin: string, args: string[], env: Record<string, string>, home: string): Promise<Run> {
  return new Promise((done, fail) => {
    const child = spawn(bin, args, {
      cwd: join(home, 'work'),
      env: { PATH: process.env.PATH ?? '', HOME: home, TERM: 'dumb', LANG: 'C.UTF-8', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += String(d);
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += String(d);
    });
    // A guard against a client that hangs (its own retries), not a latency check.
    const guard = setTimeout(() => child.kill('SIGKILL'), 150_000);
    child.on('error', fail);
    child.on('close', (code) => {
      clearTimeout(guard);
      done({ code, stdout, stderr });
    });
  });
}

function home(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ins-client-'));
  mkdirSync(join(dir, 'work'));
  return dir;
}

const claude = (url: string, key: string, model: string, prompt: string, dir: string, extra: string[] = []) =>
  run(
    CLAUDE,
    ['-p', prompt, '--model', model, '--output-format', 'text', ...extra],
    {
      ANTHROPIC_BASE_URL: url,
      ANTHROPIC_API_KEY: key,
      ANTHROPIC_MODEL: model,
      ANTHROPIC_SMALL_FAST_MODEL: model,
      ANTHROPIC_DEFAULT_HAIKU_MODEL: model,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      DISABLE_TELEMETRY: '1',
      DISABLE_AUTOUPDATER: '1',
      DISABLE_ERROR_REPORTING: '1',
      CLAUDE_CODE_MAX_RETRIES: '0',
    },
    dir,
  );

function codex(url: string, key: string, model: string, prompt: string, dir: string): Promise<Run> {
  mkdirSync(join(dir, '.codex'));
  writeFileSync(
    join(dir, '.codex', 'config.toml'),
    [
      'model_provider = "ins"',
      `model = "${model}"`,
      'check_for_update_on_startup = false',
      '',
      '[analytics]',
      'enabled = false',
      '',
      '[model_providers.ins]',
      'name = "Inference Network"',
      `base_url = "${url}/v1"`,
      'env_key = "INS_API_KEY"',
      'wire_api = "responses"',
      'request_max_retries = 0',
      'stream_max_retries = 0',
    ].join('\n'),
  );
  return run(
    CODEX,
    [
      'exec',
      '--skip-git-repo-check',
      '--ephemeral',
      '-s',
      'read-only',
      '--color',
      'never',
      '--disable',
      'plugins',
      '--disable',
      'remote_plugin',
      '--disable',
      'apps',
      prompt,
    ],
    { CODEX_HOME: join(dir, '.codex'), INS_API_KEY: key },
    dir,
  );
}

describe.runIf(existsSync(CLAUDE) && existsSync(CODEX)).each(backends)('Claude Code and Codex through the network on $name', (db) => {
  let net: TestNetwork<(typeof KINDS)[number]>;
  let url: string;
  let key: string;
  let fakes: TestNetwork<(typeof KINDS)[number]>['fakes'];
  const homes: string[] = [];
  const dir = () => {
    const d = home();
    homes.push(d);
    return d;
  };

  beforeAll(async () => {
    net = await startNetwork(db, KINDS, 'coder');
    ({ url, fakes } = net);
    key = await net.t.addUser('coding-agents');
  });
  afterAll(async () => {
    await net.close();
    for (const d of homes) rmSync(d, { recursive: true, force: true });
  });

  for (const kind of KINDS) {
    const model = `${kind}-coder`;

    it(`claude -p answers through the ${kind}-faced node, exit 0`, async () => {
      const r = await claude(url, key, model, 'say hi to the network', dir());
      expect(r.code, r.stderr + r.stdout).toBe(0);
      expect(r.stdout).toContain(`echo(${model}):`);
      expect(r.stdout).toContain('say hi to the network');
      const sent = fakes[kind].requests.at(-1)!;
      expect((sent.messages as { role: string }[])[0]!.role).toBe('system');
    });

    it(`claude -p runs a tool the ${kind}-faced node calls and sends its output back`, async () => {
      fakes[kind].toolCall = { name: 'Bash', arguments: { command: 'echo tool-ran-$((6*7))', description: 'Print a marker' } };
      try {
        const r = await claude(url, key, model, 'run the marker command', dir(), ['--allowedTools', 'Bash']);
        expect(r.code, r.stderr + r.stdout).toBe(0);
        expect(r.stdout).toContain('tool-ran-42');
      } finally {
        fakes[kind].toolCall = undefined;
      }
    });

    it(`codex exec answers through the ${kind}-faced node, exit 0`, async () => {
      const r = await codex(url, key, model, 'say hi to the network', dir());
      expect(r.code, r.stderr + r.stdout).toBe(0);
      expect(r.stdout).toContain(`echo(${model}): say hi to the network`);
    });

    it(`codex exec runs a command the ${kind}-faced node calls and sends its output back`, async () => {
      fakes[kind].toolCall = { name: 'exec_command', arguments: { cmd: 'echo tool-ran-$((6*7))' } };
      try {
        const r = await codex(url, key, model, 'run the marker command', dir());
        expect(r.code, r.stderr + r.stdout).toBe(0);
        expect(r.stdout).toContain('tool-ran-42');
      } finally {
        fakes[kind].toolCall = undefined;
      }
    });
  }
});
