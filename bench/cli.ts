// The cli scenario (`npm run bench -- --scenario cli`): how long `ins` takes for a command
// people type, `ins node add NAME`, on the embedded database: on a new DATA_DIR (the first
// run, initdb included), on an existing one, and forwarded to a running server over its admin
// socket; and `ins --help`. Wall time of the whole process, `--runs` times each, alternating
// with `--baseline DIR` (a built checkout: the code before) when given, so both see the same
// machine; and the CPU the process used (user + system, from the shell's `times`), which a busy
// machine disturbs far less than wall time. Targets (issue 30): forwarded ≤ 0.5 s, on the
// embedded database ≤ 1.5 s.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ENTRY, entryOf, percentile, printRows, ROOT, startServer } from './common.js';

export interface CliOptions {
  runs: number;
  baseline: string | undefined;
  out: string | undefined;
}

type Case = 'help' | 'new DATA_DIR' | 'existing DATA_DIR' | 'forwarded to a server';
const TARGET: Record<Case, number | undefined> = { help: undefined, 'new DATA_DIR': 1.5, 'existing DATA_DIR': 1.5, 'forwarded to a server': 0.5 };

interface Took {
  wall: number;
  cpu: number;
}

/** Runs `node entry ARGS` under sh, whose `times` prints the CPU its children used. */
function run(entry: string, args: string[], env: NodeJS.ProcessEnv): Promise<Took> {
  const t = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn('sh', ['-c', '"$0" "$@" >/dev/null; code=$?; times; exit $code', process.execPath, entry, ...args], {
      env,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`ins ${args.join(' ')} exited ${code}`));
      // The second line of `times`: the children's user and system time, e.g. "0m1.230000s 0m0.120000s".
      const [user, sys] = [
        ...out
          .trim()
          .split('\n')
          .at(-1)!
          .matchAll(/(\d+)m([\d.]+)s/g),
      ].map((m) => Number(m[1]) * 60 + Number(m[2]));
      resolve({ wall: (performance.now() - t) / 1000, cpu: user! + sys! });
    });
  });
}

/** One round of every case with the CLI at `entry`, in a data directory of its own. */
async function round(entry: string, label: string, i: number, port: number): Promise<Record<Case, Took>> {
  const dir = mkdtempSync(path.join(tmpdir(), 'ins-bench-cli-'));
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: path.join(dir, 'data') };
  delete env.DATABASE_URL;
  try {
    const help = await run(entry, ['--help'], env);
    const fresh = await run(entry, ['node', 'add', `new-${i}`], env);
    const existing = await run(entry, ['node', 'add', `existing-${i}`], env);
    const server = await startServer(env, port, path.join(ROOT, 'bench-results', `server-cli-${label}.log`), { LOG_LEVEL: 'warn' }, entry);
    try {
      const forwarded = await run(entry, ['node', 'add', `forwarded-${i}`], env);
      return { help, 'new DATA_DIR': fresh, 'existing DATA_DIR': existing, 'forwarded to a server': forwarded };
    } finally {
      await server.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function cliScenario(o: CliOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  const checkouts = [{ label: 'this', entry: ENTRY }, ...(o.baseline ? [{ label: 'baseline', entry: entryOf(o.baseline) }] : [])];
  const times = new Map(checkouts.map((c) => [c.label, new Map<Case, Took[]>()]));
  let port = 19_500 + (process.pid % 400);
  for (let i = 0; i < o.runs; i++) {
    for (const c of i % 2 === 0 ? checkouts : [...checkouts].reverse()) {
      const r = await round(c.entry, c.label, i, port++);
      console.log(
        `   run ${i + 1} ${c.label}: ${Object.entries(r)
          .map(([k, v]) => `${k} ${v.wall.toFixed(2)} s (CPU ${v.cpu.toFixed(2)} s)`)
          .join(', ')}`,
      );
      for (const [k, v] of Object.entries(r) as [Case, Took][]) times.get(c.label)!.set(k, [...(times.get(c.label)!.get(k) ?? []), v]);
    }
  }
  const rows = [
    ['case', ...checkouts.flatMap((c) => [`${c.label}: median s`, `${c.label}: max s`, `${c.label}: median CPU s`]), 'target (wall, max)'],
  ];
  const results: Record<string, Record<string, { median: number; max: number; cpuMedian: number; runs: Took[] }>> = {};
  for (const k of Object.keys(TARGET) as Case[]) {
    const row: string[] = [k];
    for (const c of checkouts) {
      const runs = times.get(c.label)!.get(k)!;
      const xs = runs.map((r) => r.wall).sort((a, b) => a - b);
      const median = percentile(xs, 50);
      const max = xs.at(-1)!;
      const cpuMedian = percentile(
        runs.map((r) => r.cpu).sort((a, b) => a - b),
        50,
      );
      (results[c.label] ??= {})[k] = { median, max, cpuMedian, runs };
      row.push(median.toFixed(2), max.toFixed(2), cpuMedian.toFixed(2));
    }
    const target = TARGET[k];
    const mine = results.this![k]!.max;
    row.push(target === undefined ? '-' : `≤ ${target} [${mine <= target ? 'met' : 'MISSED'}]`);
    rows.push(row);
  }
  printRows(rows);
  const out = o.out ?? path.join(ROOT, 'bench-results', `cli-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(out, JSON.stringify({ options: o, results }, null, 2));
  console.log(`\nwritten to ${path.relative(process.cwd(), out)}`);
}
