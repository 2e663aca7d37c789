// Whether the dispatcher's shortcuts still pay for themselves (issue "One job lifecycle"): the
// submit-time hand-off (a job submitted for a model whose worker waits on this server goes to it
// in the submission's statement) and the memory of models with no queued job (a new long poll
// of such a model waits without a lease round). The dispatch cycle and the waiting-worker cycle
// on a server with both, with neither and with each alone (bench/serve-variant.ts), VERIFY=off,
// in order and then in reverse on one database, so that neither side has the warmer machine.
// `npm run bench -- --scenario dispatch --variants`.
import path from 'node:path';
import { freshDatabase, ins, ROOT, startServer, type Backend, importBenchNodes } from './common.js';
import { cycle, http, type CycleRun } from './cycle.js';

export interface VariantRun {
  variant: string;
  full: CycleRun;
  waiting: CycleRun;
  statementsPerJob: number;
}

const VARIANTS: [string, string[]][] = [
  ['both on', []],
  ['no hand-off', ['handoff=off']],
  ['no empty-model memory', ['empty=off']],
  ['neither', ['handoff=off', 'empty=off']],
];

async function statementsSoFar(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let n = 0;
  for (const m of text.matchAll(/^ins_db_statement_duration_seconds_count\{statement="[^"]+"\} ([\d.e+-]+)$/gm)) n += Number(m[1]);
  return n;
}

export async function variantComparison(o: {
  backend: Backend;
  databaseUrl: string;
  port: number;
  workers: number;
  submitters: number;
  warmup: number;
  duration: number;
}): Promise<VariantRun[]> {
  const db = await freshDatabase(o.backend, o.databaseUrl, `ins_bench_variants_${process.pid}`);
  try {
    const nodes = await importBenchNodes(db.env, 'variant-worker', o.workers);
    const userKey = (await ins(['key', 'add-user', 'bench'], db.env)).trim();
    const runs: VariantRun[] = [];
    for (const [variant, args] of [...VARIANTS, ...[...VARIANTS].reverse()]) {
      const server = await startServer(db.env, o.port, path.join(ROOT, 'bench-results', `server-variant-${o.backend}.log`), { VERIFY: 'off' }, [
        '--import',
        'tsx',
        path.join(ROOT, 'bench', 'serve-variant.ts'),
        ...args,
      ]);
      try {
        const h = http(server.url, o.workers + o.submitters + 8);
        const before = await statementsSoFar(server.url);
        const full = await cycle(h, nodes, userKey, o.submitters, o.warmup, o.duration);
        const statementsPerJob = Math.round((((await statementsSoFar(server.url)) - before) / Math.max(1, full.submitted)) * 100) / 100;
        const waiting = await cycle(h, nodes, userKey, 1, 1, Math.max(5, Math.round(o.duration / 2)));
        await h.pool.close();
        const r = { variant, full, waiting, statementsPerJob };
        console.log(
          `   ${variant}: ${full.jobsPerSecond} jobs/s, ${statementsPerJob} statements per job; one submitter, workers waiting: submit→lease p50/p99 ${waiting.submitToLease.p50}/${waiting.submitToLease.p99} ms`,
        );
        runs.push(r);
      } finally {
        await server.stop();
      }
    }
    return runs;
  } finally {
    await db.cleanup();
  }
}
