// The seed system's way of waiting, in the dispatch scenario: S submitters each submit a job
// and poll GET /get_result every 20 ms (no `wait`) until it stops answering 404; W workers
// long-poll and report. Measured: jobs/s, submit→result, and what a pending poll costs the
// database (statements per 404, from the server's per-statement metrics). With `--baseline DIR`
// (another checkout, built: e.g. `git worktree add /tmp/before <commit> && cd /tmp/before &&
// npm ci && npm run build`), the same runs against that checkout's server in the same run,
// alternating baseline, current, current, baseline, each on a fresh database; and then the
// dispatch cycle itself (get_result with `wait`, as in bench/dispatch.ts) the same way, so that
// a change to the lifecycle is measured against the code before it in one run.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import path from 'node:path';
import {
  ENTRY,
  entryOf,
  freshDatabase,
  ins,
  mean,
  parseBackends,
  printRows,
  ROOT,
  startServer,
  type Backend,
  importBenchNodes,
  metricTotal,
  postgresCpuSeconds,
} from './common.js';
import { cycle, http, POLL_EVERY_MS, type CycleRun, type Wire } from './cycle.js';

export interface PollRun {
  code: 'current' | 'baseline';
  mode: 'poll' | 'jobs';
  run: CycleRun;
  pendingPolls: number;
  fromMemory: number;
  statementsPerPoll: Record<string, number>;
  /** The server's CPU (process_cpu_seconds_total) and its statements' summed time, per job done, in ms. */
  serverCpuMsPerJob: number;
  databaseMsPerJob: number;
  /**
   * CPU per job of the rest of the machine's work, in ms: the bench's own clients (this process)
   * and PostgreSQL's processes (null when they are not on this machine). With the server's, what
   * the whole cycle costs the machine's cores.
   */
  benchCpuMsPerJob: number;
  postgresCpuMsPerJob: number | null;
  /** get_result polls that found the job final, and the share answered from memory (no statement). */
  finishedPolls: number;
  finishedFromMemory: number;
}

/** A counter of the server's metrics (0 when absent). */
function counter(text: string, name: string, labels: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && labels.split(',').every((kv) => l.includes(kv)));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

export async function onePollRun(
  code: PollRun['code'],
  mode: PollRun['mode'],
  entry: string,
  backend: Backend,
  databaseUrl: string,
  port: number,
  workers: number,
  submitters: number,
  warmup: number,
  duration: number,
  verify = false,
  wire: Wire = { kind: 'seed' },
): Promise<PollRun> {
  const db = await freshDatabase(backend, databaseUrl, `ins_bench_polls_${process.pid}`);
  try {
    const nodes = await importBenchNodes(db.env, 'poll-worker', workers, entry);
    const userKey = (await ins(['key', 'add-user', 'bench'], db.env, entry)).trim();
    // --verify: verification on with its defaults, as the dispatch scenario's verified runs (no speed
    // cap: bench workers answer at once), for this checkout and the baseline alike.
    const verifyEnv: Record<string, string> = verify ? { VERIFY: 'on', VERIFY_MAX_TOKENS_PER_SECOND: '0' } : { VERIFY: 'off' };
    const server = await startServer(db.env, port, path.join(ROOT, 'bench-results', `server-polls-${backend}-${code}.log`), verifyEnv, entry);
    try {
      const h = http(server.url, workers + submitters + 8);
      const before = await (await fetch(`${server.url}/metrics`)).text();
      const postgresCpu = backend === 'postgres' ? await postgresCpuSeconds(databaseUrl) : undefined;
      const [pgBefore, benchBefore] = [postgresCpu?.(), process.cpuUsage()];
      const run = await cycle(h, nodes, userKey, submitters, warmup, duration, mode, wire);
      const [pgAfter, benchUsed] = [postgresCpu?.(), process.cpuUsage(benchBefore)];
      await h.pool.close();
      const text = await (await fetch(`${server.url}/metrics`)).text();
      // Kept for a look at every statement's count and time (ins_db_statement_duration_seconds).
      writeFileSync(path.join(ROOT, 'bench-results', `metrics-polls-${backend}-${code}-${mode}-${wire.kind}.txt`), text);
      const perJob = (name: string) =>
        Math.round((((metricTotal(text, name) - metricTotal(before, name)) * 1000) / Math.max(1, run.submitted)) * 1000) / 1000;
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
      const finishedFromMemory = counter(text, 'ins_finished_polls_total', 'source="memory"');
      const msPerJob = (seconds: number) => Math.round(((seconds * 1000) / Math.max(1, run.submitted)) * 1000) / 1000;
      return {
        code,
        mode,
        run,
        serverCpuMsPerJob: perJob('process_cpu_seconds_total'),
        databaseMsPerJob: perJob('ins_db_statement_duration_seconds_sum'),
        benchCpuMsPerJob: msPerJob((benchUsed.user + benchUsed.system) / 1e6),
        postgresCpuMsPerJob: pgBefore === undefined || pgAfter === undefined ? null : msPerJob(pgAfter - pgBefore),
        pendingPolls: pending,
        fromMemory: Math.round((fromMemory / Math.max(1, pending)) * 1000) / 1000,
        statementsPerPoll: per,
        finishedPolls: done,
        finishedFromMemory: Math.round((finishedFromMemory / Math.max(1, done)) * 1000) / 1000,
      };
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
export async function pollComparison(o: {
  backend: Backend;
  databaseUrl: string;
  port: number;
  workers: number;
  submitters: number;
  warmup: number;
  duration: number;
  baseline: string | undefined;
  dispatch: { workers: number; submitters: number };
  /** Verification on (VERIFY=on) in every run, this checkout's and the baseline's. */
  verify?: boolean;
}): Promise<PollRun[]> {
  const alternate = (mode: PollRun['mode']): [PollRun['code'], PollRun['mode'], string][] =>
    o.baseline
      ? [
          ['baseline', mode, entryOf(o.baseline)],
          ['current', mode, ENTRY],
          ['current', mode, ENTRY],
          ['baseline', mode, entryOf(o.baseline)],
        ]
      : [['current', mode, ENTRY]];
  const order = o.baseline ? [...alternate('poll'), ...alternate('jobs')] : alternate('poll');
  const runs: PollRun[] = [];
  for (const [code, mode, entry] of order) {
    const [workers, submitters] = mode === 'poll' ? [o.workers, o.submitters] : [o.dispatch.workers, o.dispatch.submitters];
    const r = await onePollRun(code, mode, entry, o.backend, o.databaseUrl, o.port, workers, submitters, o.warmup, o.duration, o.verify);
    console.log(`   ${mode === 'poll' ? 'poll mode' : 'dispatch cycle'} (${code}): ${JSON.stringify(r)}`);
    runs.push(r);
  }
  return runs;
}

/**
 * The poll mode's table — throughput, polls and where they were answered, and what a job costs
 * the machine's cores (the server, PostgreSQL, the bench's own clients), with the throughput
 * those cores allow at that cost — and, with a baseline, the dispatch cycle's.
 */
export function printPollTables(
  polls: Map<Backend, PollRun[]>,
  o: { pollWorkers: number; pollSubmitters: number; workers: number; submitters: number; baseline: string | undefined; verify?: boolean },
): void {
  const verification = o.verify ? 'VERIFY=on' : 'VERIFY=off';
  const table = (backend: Backend, mode: PollRun['mode']) =>
    (['baseline', 'current'] as const)
      .map((code) => [code, (polls.get(backend) ?? []).filter((r) => r.code === code && r.mode === mode)] as const)
      .filter(([, of]) => of.length > 0);
  const runs = o.baseline ? ' (baseline and current alternating: mean of two runs each)' : '';
  console.log(
    `\nthe seed's way of waiting: ${o.pollSubmitters} submitters polling get_result every ${POLL_EVERY_MS} ms, ${o.pollWorkers} workers, ${verification}${runs}; ${cpus().length} cores:`,
  );
  printRows([
    [
      'backend',
      'code',
      'jobs/s',
      'submit→lease p50 ms',
      'submit→result p50/p99 ms',
      'pending polls from memory',
      'final polls from memory',
      'jobs_own / jobs_standings per poll',
      "statements' time per job ms",
      'CPU per job ms: server / PostgreSQL / bench clients = total',
      'jobs/s the cores allow at that CPU',
    ],
    ...[...polls.keys()].flatMap((backend) =>
      table(backend, 'poll').map(([code, of]) => {
        const server = mean(of.map((r) => r.serverCpuMsPerJob));
        const database = of.every((r) => r.postgresCpuMsPerJob !== null) ? mean(of.map((r) => r.postgresCpuMsPerJob!)) : null;
        const bench = mean(of.map((r) => r.benchCpuMsPerJob));
        const total = Math.round((server + (database ?? 0) + bench) * 1000) / 1000;
        return [
          backend,
          code,
          String(mean(of.map((r) => r.run.jobsPerSecond))),
          String(mean(of.map((r) => r.run.submitToLease.p50))),
          `${mean(of.map((r) => r.run.submitToResult.p50))} / ${mean(of.map((r) => r.run.submitToResult.p99))}`,
          `${Math.round(mean(of.map((r) => r.fromMemory)) * 1000) / 10} % of ${mean(of.map((r) => r.pendingPolls))}`,
          `${Math.round(mean(of.map((r) => r.finishedFromMemory)) * 1000) / 10} %`,
          `${mean(of.map((r) => r.statementsPerPoll.jobs_own ?? 0))} / ${mean(of.map((r) => r.statementsPerPoll.jobs_standings ?? 0))}`,
          String(mean(of.map((r) => r.databaseMsPerJob))),
          `${server} / ${database ?? 'n/a'} / ${bench} = ${total}${database === null ? ' (no database)' : ''}`,
          database === null ? 'n/a' : String(Math.round((cpus().length * 1000) / total)),
        ];
      }),
    ),
  ]);
  if (!o.baseline) return;
  console.log(
    `\nthe dispatch cycle against the baseline (${o.workers} workers, ${o.submitters} submitters, get_result with wait, ${verification}; mean of two runs each, alternating):`,
  );
  printRows([
    ['backend', 'code', 'jobs/s', 'submit→lease p50/p99 ms', 'submit→result p50/p99 ms', 'server CPU / database ms per job'],
    ...[...polls.keys()].flatMap((backend) =>
      table(backend, 'jobs').map(([code, of]) => [
        backend,
        code,
        String(mean(of.map((r) => r.run.jobsPerSecond))),
        `${mean(of.map((r) => r.run.submitToLease.p50))} / ${mean(of.map((r) => r.run.submitToLease.p99))}`,
        `${mean(of.map((r) => r.run.submitToResult.p50))} / ${mean(of.map((r) => r.run.submitToResult.p99))}`,
        `${mean(of.map((r) => r.serverCpuMsPerJob))} / ${mean(of.map((r) => r.databaseMsPerJob))}`,
      ]),
    ),
  ]);
}

export interface PollsOptions {
  backends: string;
  databaseUrl: string;
  warmup: number;
  duration: number;
  out: string | undefined;
  baseline: string | undefined;
  pollWorkers: number;
  pollSubmitters: number;
  workers: number;
  submitters: number;
  /** --verify: verification on in every run. */
  verify: boolean;
}

/** `--scenario polls`: the seed's way of waiting alone (and, with --baseline, against the code before; the dispatch cycle too). */
export async function pollsScenario(o: PollsOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  let port = 19_000 + (process.pid % 500);
  const polls = new Map<Backend, PollRun[]>();
  for (const backend of parseBackends(o.backends)) {
    polls.set(
      backend,
      await pollComparison({
        backend,
        databaseUrl: o.databaseUrl,
        port: port++,
        workers: o.pollWorkers,
        submitters: o.pollSubmitters,
        warmup: o.warmup,
        duration: o.duration,
        baseline: o.baseline,
        dispatch: { workers: o.workers, submitters: o.submitters },
        verify: o.verify,
      }),
    );
  }
  printPollTables(polls, o);
  const out = o.out ?? path.join(ROOT, 'bench-results', `polls-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(out, JSON.stringify({ options: o, cores: cpus().length, node: process.version, polls: Object.fromEntries(polls) }, null, 2));
  console.log(`\nwritten to ${path.relative(process.cwd(), out)}`);
}
