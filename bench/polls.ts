// The seed system's way of waiting, in the dispatch scenario: S submitters each submit a job
// and poll GET /get_result every 20 ms (no `wait`) until it stops answering 404; W workers
// long-poll and report. Measured: jobs/s, submit→result, and what a pending poll costs the
// database (statements per 404, from the server's per-statement metrics). With `--baseline DIR`
// (another checkout, built: e.g. `git worktree add /tmp/before <commit> && cd /tmp/before &&
// npm ci && npm run build`), the same runs against that checkout's server in the same run,
// alternating baseline, current, current, baseline, each on a fresh database; and then the
// dispatch cycle itself (get_result with `wait`, as in bench/dispatch.ts) the same way, so that
// a change to the lifecycle is measured against the code before it in one run.
import path from 'node:path';
import { ENTRY, entryOf, freshDatabase, ins, ROOT, startServer, type Backend, importBenchNodes } from './common.js';
import { cycle, http, type CycleRun } from './cycle.js';

export interface PollRun {
  code: 'current' | 'baseline'; mode: 'poll' | 'jobs'; run: CycleRun; pendingPolls: number; fromMemory: number; statementsPerPoll: Record<string, number>;
  /** The server's CPU (process_cpu_seconds_total) and its statements' summed time, per job done, in ms. */
  serverCpuMsPerJob: number; databaseMsPerJob: number;
}

/** The sum of a metric's series (all labels). */
function total(text: string, name: string): number {
  let n = 0;
  for (const l of text.split('\n')) if (l.startsWith(`${name}{`) || l.startsWith(`${name} `)) n += Number(l.slice(l.lastIndexOf(' ') + 1));
  return n;
}

/** A counter of the server's metrics (0 when absent). */
function counter(text: string, name: string, labels: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && labels.split(',').every((kv) => l.includes(kv)));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

async function onePollRun(code: PollRun['code'], mode: PollRun['mode'], entry: string, backend: Backend, databaseUrl: string, port: number, workers: number, submitters: number, warmup: number, duration: number): Promise<PollRun> {
  const db = await freshDatabase(backend, databaseUrl, `ins_bench_polls_${process.pid}`);
  try {
    const nodes = await importBenchNodes(db.env, 'poll-worker', workers, entry);
    const userKey = (await ins(['key', 'add-user', 'bench'], db.env, entry)).trim();
    const server = await startServer(db.env, port, path.join(ROOT, 'bench-results', `server-polls-${backend}-${code}.log`), { VERIFY: 'off' }, entry);
    try {
      const h = http(server.url, workers + submitters + 8);
      const before = await (await fetch(`${server.url}/metrics`)).text();
      const run = await cycle(h, nodes, userKey, submitters, warmup, duration, mode);
      await h.pool.close();
      const text = await (await fetch(`${server.url}/metrics`)).text();
      const perJob = (name: string) => Math.round(((total(text, name) - total(before, name)) * 1000 / Math.max(1, run.submitted)) * 1000) / 1000;
      const pending = counter(text, 'http_requests_total', 'route="/get_result/:job_id",status="404"');
      const done = counter(text, 'http_requests_total', 'route="/get_result/:job_id",status="200"');
      const polls = pending + done;
      // Statements a poll may run: the job's read (concurrent reads share one) and, since issue 21,
      // the once-a-second refresh of where the polled jobs stand. Pending polls answered from
      // memory ran none (ins_pending_polls_total, a baseline without it reads every one).
      const per: Record<string, number> = {};
      for (const name of ['jobs_own', 'jobs_standings']) {
        per[name] = Math.round((counter(text, 'ins_db_statement_duration_seconds_count', `statement="${name}"`) / Math.max(1, polls)) * 1000) / 1000;
      }
      const fromMemory = counter(text, 'ins_pending_polls_total', 'source="memory"');
      return { code, mode, run, serverCpuMsPerJob: perJob('process_cpu_seconds_total'), databaseMsPerJob: perJob('ins_db_statement_duration_seconds_sum'), pendingPolls: pending, fromMemory: Math.round((fromMemory / Math.max(1, pending)) * 1000) / 1000, statementsPerPoll: per };
    } finally {
      await server.stop();
    }
  } finally {
    await db.cleanup();
  }
}

/**
 * Poll-mode runs for this checkout and, given one, the baseline: alternating, so that neither has
 * the warmer machine; with a baseline, the dispatch cycle (`wait`) too, with its own workers and submitters.
 */
export async function pollComparison(o: { backend: Backend; databaseUrl: string; port: number; workers: number; submitters: number; warmup: number; duration: number; baseline: string | undefined;
  dispatch: { workers: number; submitters: number } }): Promise<PollRun[]> {
  const alternate = (mode: PollRun['mode']): [PollRun['code'], PollRun['mode'], string][] => (o.baseline
    ? [['baseline', mode, entryOf(o.baseline)], ['current', mode, ENTRY], ['current', mode, ENTRY], ['baseline', mode, entryOf(o.baseline)]]
    : [['current', mode, ENTRY]]);
  const order = o.baseline ? [...alternate('poll'), ...alternate('jobs')] : alternate('poll');
  const runs: PollRun[] = [];
  for (const [code, mode, entry] of order) {
    const [workers, submitters] = mode === 'poll' ? [o.workers, o.submitters] : [o.dispatch.workers, o.dispatch.submitters];
    const r = await onePollRun(code, mode, entry, o.backend, o.databaseUrl, o.port, workers, submitters, o.warmup, o.duration);
    console.log(`   ${mode === 'poll' ? 'poll mode' : 'dispatch cycle'} (${code}): ${JSON.stringify(r)}`);
    runs.push(r);
  }
  return runs;
}
