// vitest's globalSetup (vitest.config.ts): the source compiled once per run for the processes
// tests start (`ins serve`, `ins worker`, `ins node add`...). Through `--import tsx` each of
// them loaded tsx and transformed (or looked up in tsx's cache) every module it imported at
// start: about 0.4 s of CPU a process on an idle machine, some hundred processes a run. esbuild
// (what tsx runs) transpiles src/ file by file, as tsx does, into a directory beside src/, so
// that paths relative to the package (src/paths.ts, the version in cli/main.ts) hold as in
// dist/. The source of this run, not a stale build: no `npm run build` needed.
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';
import { ROOT } from './process.js';

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? sources(p) : e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : [];
  });
}

export default async function setup(): Promise<() => void> {
  // One directory per run: two runs in one checkout do not share it.
  const out = path.join(ROOT, `.test-build-${process.pid}`);
  rmSync(out, { recursive: true, force: true });
  await build({
    entryPoints: sources(path.join(ROOT, 'src')),
    outdir: out,
    outbase: path.join(ROOT, 'src'),
    bundle: false,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    sourcemap: 'inline',
    logLevel: 'warning',
  });
  const cli = path.join(out, 'cli', 'entry.js');
  process.env.INS_TEST_CLI = cli;
  return () => {
    killLeftBehind(cli);
    rmSync(out, { recursive: true, force: true });
  };
}

/**
 * Kills the processes still running this run's compile (`ins serve`, `ins worker`): a test that
 * failed before it stopped its server leaves it running, and vitest ends its test processes
 * with SIGTERM, which gives them no chance to (a server of server.test.ts was found serving an
 * hour after its run).
 */
function killLeftBehind(cli: string): void {
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(cli)) process.kill(Number(pid), 'SIGKILL');
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
}
