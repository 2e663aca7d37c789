// PostgreSQL's CPU by function, from Linux perf (statement-stats --pg-perf): `perf record -a -g`
// samples every process for the measured seconds, and the samples of processes named postgres
// are summed, for each function of FUNCTIONS, as the share of PostgreSQL's samples that have it
// on their stack (inclusive). Debian's postgres binary keeps the symbols of its exported
// functions, which is what FUNCTIONS names; static ones show as [unknown] and are skipped. Needs
// perf (Debian's linux-perf) and the right to sample the whole machine (root, or
// kernel.perf_event_paranoid ≤ 0).
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { promisify } from 'node:util';

/** Where PostgreSQL's CPU goes in a job's statements: executor phases, the writes' parts, the commit, parameter input. */
export const FUNCTIONS = [
  'standard_ExecutorStart',
  'ExecInitModifyTable',
  'standard_ExecutorRun',
  'standard_ExecutorFinish',
  'ExecSetParamPlan',
  'ExecInsertIndexTuples',
  'heap_insert',
  'heap_update',
  'ExecConstraints',
  'textregexeq',
  'ExecInitStoredGenerated',
  'plpgsql_exec_function',
  'plpgsql_exec_trigger',
  'array_in',
  'jsonb_in',
  'GetCachedPlan',
  'CommitTransactionCommand',
  'XLogFlush',
  'secure_read',
  'secure_write',
] as const;

export interface PerfRecording {
  stop: () => Promise<Map<string, number> & { samples: number }>;
}

/** Starts sampling the whole machine into `file`; stop() ends it and answers each function's share of PostgreSQL's samples. */
export function recordPerf(file: string): PerfRecording {
  const perf: ChildProcess = spawn('perf', ['record', '-a', '-g', '-F', '499', '-o', file], { stdio: 'ignore' });
  // once() rejects on 'error' (no perf on this machine): the run still finishes, then stop() says so.
  const exited = once(perf, 'exit');
  exited.catch(() => undefined);
  return {
    stop: async () => {
      perf.kill('SIGINT');
      await exited.catch((err: Error) => {
        throw new Error(`--pg-perf needs Linux perf (Debian: apt-get install linux-perf): ${err.message}`);
      });
      const { stdout } = await promisify(execFile)('perf', ['script', '-i', file, '--comm', 'postgres', '-F', 'comm,ip,sym'], { maxBuffer: 1 << 30 });
      return sharesOf(stdout);
    },
  };
}

/** Each function's inclusive share of the samples in `perf script` output (a header line, then one frame per line, a blank line between samples). */
export function sharesOf(script: string): Map<string, number> & { samples: number } {
  const counts = new Map<string, number>(FUNCTIONS.map((f) => [f, 0]));
  let samples = 0;
  for (const sample of script.split(/\n\s*\n/)) {
    const frames = sample
      .split('\n')
      .slice(1)
      .map((line) => /^\s*\S+\s+([^\s+]+)/.exec(line)?.[1])
      .filter((f): f is string => f !== undefined);
    if (frames.length === 0) continue;
    samples++;
    for (const f of new Set(frames)) if (counts.has(f)) counts.set(f, counts.get(f)! + 1);
  }
  const shares = new Map([...counts].map(([f, n]) => [f, samples === 0 ? 0 : n / samples])) as Map<string, number> & { samples: number };
  shares.samples = samples;
  return shares;
}
