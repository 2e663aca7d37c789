// `npm run bench -- --scenario worker-wire`: the dispatch cycle (submit_job and get_result with
// `wait`, VERIFY=off, bench/cycle.ts) with its workers on the seed's wire — get_job with `wait`,
// then update_result, per job — against the same workers on `ins worker`'s own wire (POST
// /worker/jobs/next: the reports of the jobs a worker holds and its ask for up to --max-jobs more,
// in one call), alternating seed, ins, ins, seed on fresh databases in one run, so that the
// ratio is of one machine at one time. Per run: jobs/s, and the CPU a job costs the server and
// PostgreSQL (its processes', from /proc) and the bench's own clients (bench/polls.ts onePollRun).
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import path from 'node:path';
import { ENTRY, mean, parseBackends, printRows, ROOT } from './common.js';
import { onePollRun, type PollRun } from './polls.js';
import type { Wire } from './cycle.js';

export interface WorkerWireOptions {
  backends: string;
  databaseUrl: string;
  warmup: number;
  duration: number;
  workers: number;
  submitters: number;
  maxJobs: number;
  /** The ins wire's workers (default: `workers`): fewer, each holding up to maxJobs at once, so that one call carries several reports and leases. */
  insWorkers?: number;
  /** Alternating pairs (seed, ins, ins, seed is two). */
  pairs: number;
  out: string | undefined;
}

export async function workerWireScenario(o: WorkerWireOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  let port = 19_500 + (process.pid % 400);
  const wires: Wire[] = [{ kind: 'seed' }, { kind: 'ins', maxJobs: o.maxJobs }];
  const all: { backend: string; wire: string; run: PollRun }[] = [];
  for (const backend of parseBackends(o.backends)) {
    for (let pair = 0; pair < o.pairs; pair++) {
      for (const wire of pair % 2 === 0 ? wires : [...wires].reverse()) {
        const run = await onePollRun(
          'current',
          'jobs',
          ENTRY,
          backend,
          o.databaseUrl,
          port++,
          wire.kind === 'ins' ? (o.insWorkers ?? o.workers) : o.workers,
          o.submitters,
          o.warmup,
          o.duration,
          false,
          wire,
        );
        console.log(`   ${backend} ${wire.kind}: ${JSON.stringify(run)}`);
        all.push({ backend, wire: wire.kind, run });
      }
    }
  }
  const rows = [
    [
      'backend',
      'wire',
      'jobs/s (each run)',
      'jobs/s, mean',
      'submit→result p50 ms',
      'CPU per job ms: server / PostgreSQL / bench clients',
      'server + PostgreSQL',
    ],
  ];
  const ratios: string[] = [];
  for (const backend of new Set(all.map((r) => r.backend))) {
    const rate: Record<string, number> = {};
    for (const wire of ['seed', 'ins']) {
      const of = all.filter((r) => r.backend === backend && r.wire === wire).map((r) => r.run);
      const server = mean(of.map((r) => r.serverCpuMsPerJob));
      const pg = of.every((r) => r.postgresCpuMsPerJob !== null) ? mean(of.map((r) => r.postgresCpuMsPerJob!)) : null;
      rate[wire] = mean(of.map((r) => r.run.jobsPerSecond));
      rows.push([
        backend,
        wire === 'seed'
          ? `seed (get_job + update_result), ${o.workers} workers`
          : `ins (jobs/next, max_jobs ${o.maxJobs}), ${o.insWorkers ?? o.workers} workers`,
        of.map((r) => r.run.jobsPerSecond).join(', '),
        String(rate[wire]),
        String(mean(of.map((r) => r.run.submitToResult.p50))),
        `${server} / ${pg ?? 'n/a'} / ${mean(of.map((r) => r.benchCpuMsPerJob))}`,
        pg === null ? `${server} (server only)` : String(Math.round((server + pg) * 1000) / 1000),
      ]);
    }
    ratios.push(`${backend}: ins / seed = ${Math.round((rate.ins! / rate.seed!) * 100) / 100}`);
  }
  console.log(
    `\nthe dispatch cycle by the workers' wire: ${o.workers} workers, ${o.submitters} submitters (submit_job + get_result with wait), VERIFY=off, ${o.pairs} alternating pair(s); ${cpus().length} cores:`,
  );
  printRows(rows);
  console.log(ratios.join('; '));
  const out = o.out ?? path.join(ROOT, 'bench-results', `worker-wire-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(out, JSON.stringify({ options: o, cores: cpus().length, node: process.version, runs: all }, null, 2));
  console.log(`\nwritten to ${path.relative(process.cwd(), out)}`);
}
