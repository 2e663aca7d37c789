// The dispatch scenario (`npm run bench -- --scenario dispatch`): the coordinator's whole cycle
// over HTTP against the built server. W workers register with their node keys, declare a model
// and long-poll get_job, reporting each job with its job key; S submitters submit_job and wait
// for the result (get_result with `wait`). Measured: jobs/s end to end (submit, lease, report,
// result read back), submit→lease and submit→result latencies, and whether any job was lost
// or done twice (checked in the database afterwards too). Then, with one submitter and the
// workers idle, submit→lease with a waiting worker. Then the queue alone, in one process and
// without HTTP, against pg-boss on the same workload (bench/queue-cycle.ts).
// Jobs are at temperature 0 with prompts of their own, answered with about 50 words that
// depend on the prompt (as honest nodes would), so verification (on, with its defaults, as in
// production, but the speed check: bench workers answer at once) remembers every answer and
// runs its share of copies; the full cycle runs once
// more with VERIFY=off on a server of its own, to tell what verification costs. Then the seed's
// way of waiting, polling get_result (bench/polls.ts; against another checkout too with
// --baseline DIR), and with --variants what the dispatcher's shortcuts are worth (bench/variants.ts).
import { writeFileSync, mkdirSync } from 'node:fs';
import { cpus } from 'node:os';
import path from 'node:path';
import { adminQuery, freshDatabase, ins, mean, parseBackends, printRows, ROOT, startServer, type Backend, importBenchNodes } from './common.js';
import { cycle, http, type CycleRun } from './cycle.js';
import { ourQueueCycle, pgBossCycle, type CycleResult } from './queue-cycle.js';
import { pollComparison, printPollTables, type PollRun } from './polls.js';
import { variantComparison, type VariantRun } from './variants.js';

export interface DispatchOptions {
  workers: number;
  submitters: number;
  duration: number;
  warmup: number;
  backends: string;
  databaseUrl: string;
  pairs: number[];
  out: string | undefined;
  /** The poll mode: workers and submitters (the issue's 32 and 64). */
  pollWorkers: number;
  pollSubmitters: number;
  /** Another built checkout to compare the poll mode with (the code before a change). */
  baseline: string | undefined;
  /** Also measure the dispatcher's shortcuts on and off. */
  variants: boolean;
}

/**
 * Users' jobs, those not done, results recorded and points credited, as the database has them:
 * every job (users' and verification's) done once, its node credited once. Copies made after
 * the workers stopped may stay queued.
 */
async function databaseCheck(backend: Backend, env: NodeJS.ProcessEnv, expected: number): Promise<string> {
  if (backend !== 'postgres') return 'n/a (embedded: the server holds it)';
  const r = await adminQuery(
    env.DATABASE_URL!,
    `SELECT count(*) FILTER (WHERE kind = 'user')::int AS jobs, count(*) FILTER (WHERE state <> 'done' AND kind = 'user')::int AS open,
    count(*) FILTER (WHERE state = 'done')::int AS done, (SELECT count(*)::int FROM job_results WHERE status = 'success') AS results,
    (SELECT coalesce(sum(points), 0)::float8 FROM node_daily_points) AS points FROM jobs`,
  );
  const row = r.rows[0] as { jobs: number; open: number; done: number; results: number; points: number };
  const ok = row.open === 0 && row.jobs === expected && row.results === row.done && row.points === row.done;
  return `${ok ? 'ok' : 'MISMATCH'}: ${row.jobs} users' jobs, ${row.done - row.jobs} copies and probes done, ${row.open} users' jobs not done, ${row.results} results, ${row.points} points`;
}

/** Jobs verification added (copies, probes) per user job, from the server's metrics. */
async function verificationShare(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const value = (name: string) =>
    Number(
      text
        .split('\n')
        .find((l) => l.startsWith(`${name} `))
        ?.slice(name.length + 1) ?? 0,
    );
  const extra = value('ins_verification_total{event="copy"}') + value('ins_verification_total{event="probe"}');
  return Math.round((extra / Math.max(1, value('ins_jobs_submitted_total'))) * 1000) / 1000;
}

/** Where the database time went: each statement's count per job and mean duration, from the server's metrics. */
async function statementsPerJob(url: string, jobs: number): Promise<string> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const stats = new Map<string, { count: number; sum: number }>();
  for (const m of text.matchAll(/^ins_db_statement_duration_seconds_(count|sum)\{statement="([^"]+)"\} ([\d.e+-]+)$/gm)) {
    const s = stats.get(m[2]!) ?? { count: 0, sum: 0 };
    s[m[1] as 'count' | 'sum'] = Number(m[3]);
    stats.set(m[2]!, s);
  }
  const each = [...stats]
    .filter(([, s]) => s.count >= jobs / 100)
    .sort((a, b) => b[1].count - a[1].count)
    .map(([name, s]) => `${name} ${(s.count / jobs).toFixed(2)} × ${((s.sum / s.count) * 1000).toFixed(2)} ms`)
    .join(', ');
  // The auditor's statements run in batches, rarely each: their time per job, summed.
  const verify = [...stats].filter(([name]) => name.startsWith('verify_'));
  const verifyMs = (verify.reduce((t, [, s]) => t + s.sum, 0) * 1000) / jobs;
  return verify.length === 0
    ? each
    : `${each}; verification statements ${verifyMs.toFixed(3)} ms per job (${verify
        .sort((a, b) => b[1].sum - a[1].sum)
        .slice(0, 4)
        .map(([name, s]) => `${name} ${((s.sum * 1000) / jobs).toFixed(3)}`)
        .join(', ')})`;
}

interface BackendRun {
  backend: Backend;
  full: CycleRun;
  verifiedMean: number;
  unverifiedMean: number;
  extraShare: number;
  waiting: CycleRun;
  gateway: CycleRun;
}

async function benchBackend(o: DispatchOptions, backend: Backend, port: number): Promise<BackendRun> {
  const db = await freshDatabase(backend, o.databaseUrl, `ins_bench_dispatch_${process.pid}`);
  try {
    // Nodes and the user key first: the embedded database is one process's at a time.
    const nodes = await importBenchNodes(db.env, 'bench-worker', o.workers);
    const userKey = (await ins(['key', 'add-user', 'bench'], db.env)).trim();
    // Bench workers answer at once, faster than any GPU: the speed check would rightly suspend
    // them all, so it is off; every other check runs with its defaults.
    console.log(`\n== ${backend}: ${o.workers} workers, ${o.submitters} submitters, ${o.warmup} + ${o.duration} s`);
    // The cycle without verification, on a server of its own (same database): before the
    // verified runs and after them, so that neither side has the warmer machine.
    const unverifiedRun = async (n: number) => {
      const bare = await startServer(db.env, port, path.join(ROOT, 'bench-results', `server-dispatch-${backend}-unverified-${n}.log`), {
        VERIFY: 'off',
      });
      try {
        const hb = http(bare.url, o.workers + o.submitters + 8);
        const run = await cycle(hb, nodes, userKey, o.submitters, o.warmup, o.duration);
        console.log(`   VERIFY=off (${n} of 2): ${JSON.stringify(run)}`);
        console.log(`   statements per job (from /metrics): ${await statementsPerJob(bare.url, run.submitted)}`);
        await hb.pool.close();
        return run;
      } finally {
        await bare.stop();
      }
    };
    const unverified = [await unverifiedRun(1)];
    const server = await startServer(db.env, port, path.join(ROOT, 'bench-results', `server-dispatch-${backend}.log`), {
      VERIFY_MAX_TOKENS_PER_SECOND: '0',
    });
    try {
      const h = http(server.url, o.workers + o.submitters + 8);
      const full = await cycle(h, nodes, userKey, o.submitters, o.warmup, o.duration);
      full.dbCheck = await databaseCheck(backend, db.env, unverified[0]!.submitted + full.submitted);
      console.log(`   ${JSON.stringify(full)}`);
      console.log(`   statements per job (from /metrics): ${await statementsPerJob(server.url, full.submitted)}`);
      const extraShare = await verificationShare(server.url);
      console.log(`   verification added ${(extraShare * 100).toFixed(1)} % jobs (copies and probes)`);
      console.log('   one submitter, workers waiting: submit→lease');
      const waiting = await cycle(h, nodes, userKey, 1, 1, Math.max(5, Math.round(o.duration / 2)));
      console.log(`   ${JSON.stringify(waiting)}`);
      console.log(`   ${o.submitters} OpenAI clients (POST /v1/chat/completions) instead of submit_job + get_result`);
      const gateway = await cycle(h, nodes, userKey, o.submitters, o.warmup, o.duration, 'openai');
      console.log(`   ${JSON.stringify(gateway)}`);
      const again = await cycle(h, nodes, userKey, o.submitters, o.warmup, o.duration);
      console.log(`   verified, once more: ${JSON.stringify(again)}`);
      await h.pool.close();
      await server.stop();
      unverified.push(await unverifiedRun(2));
      const mean = (runs: CycleRun[]) => Math.round(runs.reduce((s, r) => s + r.jobsPerSecond, 0) / runs.length);
      return { backend, full, verifiedMean: mean([full, again]), unverifiedMean: mean(unverified), extraShare, waiting, gateway };
    } finally {
      await server.stop();
    }
  } finally {
    await db.cleanup();
  }
}

export async function dispatchScenario(o: DispatchOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  const runs: BackendRun[] = [];
  let port = 18_500 + (process.pid % 500);
  const polls = new Map<Backend, PollRun[]>();
  const variants = new Map<Backend, VariantRun[]>();
  for (const backend of parseBackends(o.backends)) {
    runs.push(await benchBackend(o, backend, port++));
    console.log(
      `   the seed's way of waiting: ${o.pollSubmitters} submitters poll get_result every 20 ms, ${o.pollWorkers} workers${o.baseline ? `; against ${o.baseline} too` : ''}`,
    );
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
      }),
    );
    if (o.variants) {
      console.log("   the dispatcher's shortcuts on and off (VERIFY=off):");
      variants.set(
        backend,
        await variantComparison({
          backend,
          databaseUrl: o.databaseUrl,
          port: port++,
          workers: o.workers,
          submitters: o.submitters,
          warmup: o.warmup,
          duration: o.duration,
        }),
      );
    }
  }
  const cycles: CycleResult[] = [];
  for (const pairs of o.pairs) {
    cycles.push(await ourQueueCycle(o.databaseUrl, pairs, o.duration));
    cycles.push(await pgBossCycle(o.databaseUrl, pairs, o.duration));
  }

  console.log(`\ndispatch: ${o.workers} workers, ${o.submitters} submitters, ${o.duration} s; ${cpus().length} cores, Node ${process.version}`);
  const target = (b: Backend) => (b === 'postgres' ? 1500 : 500);
  const rows = [
    [
      'backend',
      'jobs/s e2e [target]',
      'submit→lease p50/p99 ms',
      'submit→result p50/p99 ms',
      'lost',
      'duplicated',
      'waiting worker: submit→lease p50/p99 ms [≤3/≤25]',
      'database',
    ],
  ];
  for (const r of runs) {
    rows.push([
      r.backend,
      `${r.full.jobsPerSecond} [≥${target(r.backend)}: ${r.full.jobsPerSecond >= target(r.backend) ? 'met' : 'MISSED'}]`,
      `${r.full.submitToLease.p50} / ${r.full.submitToLease.p99}`,
      `${r.full.submitToResult.p50} / ${r.full.submitToResult.p99}`,
      String(r.full.lost),
      String(r.full.duplicated),
      `${r.waiting.submitToLease.p50} / ${r.waiting.submitToLease.p99}`,
      r.full.dbCheck,
    ]);
  }
  printRows(rows);
  console.log('\nverification (on, its defaults) against the same cycle with VERIFY=off (each the mean of two runs, off-on-on-off):');
  printRows([
    ['backend', 'jobs/s verified', 'jobs/s VERIFY=off', 'throughput kept [≥90 %]', 'extra jobs [≤10 %]'],
    ...runs.map((r) => {
      const kept = Math.round((r.verifiedMean / Math.max(1, r.unverifiedMean)) * 1000) / 10;
      return [
        r.backend,
        String(r.verifiedMean),
        String(r.unverifiedMean),
        `${kept} % [${kept >= 90 ? 'met' : 'MISSED'}]`,
        `${(r.extraShare * 100).toFixed(1)} % [${r.extraShare <= 0.1 ? 'met' : 'MISSED'}]`,
      ];
    }),
  ]);
  console.log(
    `\nthe OpenAI-compatible API: ${o.submitters} clients, each one completion at a time, against the same cycle by submit_job + get_result:`,
  );
  printRows([
    ['backend', 'completions/s', 'request→answer p50/p99 ms', 'jobs: submit→result p50 ms', 'added by the gateway, p50 ms [≤2]'],
    ...runs.map((r) => {
      const added = Math.round((r.gateway.submitToResult.p50 - r.full.submitToResult.p50) * 10) / 10;
      return [
        r.backend,
        String(r.gateway.jobsPerSecond),
        `${r.gateway.submitToResult.p50} / ${r.gateway.submitToResult.p99}`,
        String(r.full.submitToResult.p50),
        `${added} [${added <= 2 ? 'met' : 'MISSED'}]`,
      ];
    }),
  ]);
  printPollTables(polls, {
    pollWorkers: o.pollWorkers,
    pollSubmitters: o.pollSubmitters,
    workers: o.workers,
    submitters: o.submitters,
    baseline: o.baseline,
  });
  if (variants.size > 0) {
    console.log("\nthe dispatcher's shortcuts (VERIFY=off; mean of two runs each, in order then in reverse):");
    printRows([
      ['backend', 'variant', 'jobs/s', 'statements per job', 'waiting worker: submit→lease p50/p99 ms'],
      ...[...variants].flatMap(([backend, rs]) =>
        [...new Set(rs.map((r) => r.variant))].map((variant) => {
          const of = rs.filter((r) => r.variant === variant);
          return [
            backend,
            variant,
            String(mean(of.map((r) => r.full.jobsPerSecond))),
            String(mean(of.map((r) => r.statementsPerJob))),
            `${mean(of.map((r) => r.waiting.submitToLease.p50))} / ${mean(of.map((r) => r.waiting.submitToLease.p99))}`,
          ];
        }),
      ),
    ]);
  }
  console.log('\nthe queue alone, one process, no HTTP (submit/send, lease/fetch, complete), PostgreSQL:');
  printRows([
    ['queue', 'pairs', 'jobs/s', 'p50 ms', 'p99 ms'],
    ...cycles.map((c) => [c.queue, String(c.pairs), String(c.jobsPerSecond), String(c.p50), String(c.p99)]),
  ]);
  const out = o.out ?? path.join(ROOT, 'bench-results', `dispatch-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(
    out,
    JSON.stringify(
      {
        options: o,
        cores: cpus().length,
        node: process.version,
        runs,
        polls: Object.fromEntries(polls),
        variants: Object.fromEntries(variants),
        cycles,
      },
      null,
      2,
    ),
  );
  console.log(`\nwritten to ${path.relative(process.cwd(), out)}`);
}
