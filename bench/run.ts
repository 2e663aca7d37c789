// `npm run bench [-- --scenario NAME]`: the benchmarks. Scenarios:
// - endpoints (default): the record-keeping endpoints over an imported history (bench/endpoints.ts);
// - dispatch: the coordinator's cycle over HTTP, then the queue alone against pg-boss (bench/dispatch.ts);
// - polls: the seed's way of waiting (get_result every 20 ms) alone, against another checkout too (bench/polls.ts);
// - idle: thousands of workers long-polling an idle server: its CPU and memory (bench/idle.ts);
// - worker: `ins worker` between the server and an instant backend (bench/worker.ts);
// - fair: fair queueing, a heavy user's backlog beside a light user (bench/fair.ts);
// - ledger-closing: update_result while a server closes imported history at start, against its steady rate (bench/ledger-closing.ts);
// - lease-plan: jobs_lease planned anew at each execution against one generic plan, with a deep backlog (bench/lease-plan.ts);
// - ledger: closing a day of 5,000,000 credits, and `ins ledger verify` of a node's 30 days (bench/ledger.ts);
// - retention: total_job_count with 0 and 3,000,000 jobs, and a soak with retention on: the database's size (bench/retention.ts);
// - request-cost: the server's CPU per request of the job cycle's commonest requests, against another checkout (bench/request-cost.ts);
// - cli: how long `ins node add` takes on a new and an existing embedded database and forwarded to a server (bench/cli.ts);
// - added-latency: what the network adds to one chat completion, streamed and not, over the backend alone (bench/added-latency.ts);
// - worker-wire: the dispatch cycle with its workers on the seed's wire against `ins worker`'s own (bench/worker-wire.ts).
// Every size is a flag (--help).
import path from 'node:path';
import { parseArgs } from 'node:util';
import { endpointsScenario } from './endpoints.js';
import { endpointsAgainst } from './endpoints-baseline.js';
import { dispatchScenario } from './dispatch.js';
import { idleScenario } from './idle.js';
import { workerScenario } from './worker.js';
import { ledgerScenario } from './ledger.js';
import { ledgerClosingScenario } from './ledger-closing.js';
import { leasePlanScenario } from './lease-plan.js';
import { fairScenario } from './fair.js';
import { retentionScenario } from './retention.js';
import { pollsScenario } from './polls.js';
import { cliScenario } from './cli.js';
import { requestCostScenario } from './request-cost.js';
import { statementStatsScenario } from './statement-stats.js';
import { addedLatencyScenario } from './added-latency.js';
import { workerWireScenario } from './worker-wire.js';

const { values: flags } = parseArgs({
  options: {
    scenario: { type: 'string', default: 'endpoints' },
    nodes: { type: 'string', default: '2000' },
    models: { type: 'string', default: '20' },
    results: { type: 'string', default: '5000000' },
    days: { type: 'string', default: '90' },
    success: { type: 'string', default: '0.95' },
    seed: { type: 'string', default: '1' },
    duration: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '2' },
    connections: { type: 'string', default: '32' },
    workers: { type: 'string', default: '64' },
    submitters: { type: 'string', default: '32' },
    pairs: { type: 'string', default: '32,8' },
    'poll-workers': { type: 'string', default: '32' },
    'poll-submitters': { type: 'string', default: '64' },
    baseline: { type: 'string' },
    'client-mode': { type: 'string', default: 'jobs' },
    analyze: { type: 'boolean', default: false },
    variants: { type: 'boolean', default: false },
    verify: { type: 'boolean', default: false },
    idle: { type: 'string', default: '5000' },
    'fair-workers': { type: 'string', default: '16' },
    backlog: { type: 'string', default: '5000' },
    'service-ms': { type: 'string', default: '20' },
    'light-rate': { type: 'string', default: '1' },
    backends: { type: 'string', default: 'postgres,pglite' },
    'database-url': { type: 'string', default: process.env.BENCH_DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/test' },
    'data-dir': { type: 'string', default: 'bench-results/data' },
    out: { type: 'string' },
    keep: { type: 'boolean', default: false },
    jobs: { type: 'string', default: '3000000' },
    window: { type: 'string', default: '20' },
    'closing-results': { type: 'string', default: '1000000' },
    queued: { type: 'string', default: '100000' },
    runs: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '8' },
    only: { type: 'string' },
    'max-jobs': { type: 'string', default: '4' },
    'ins-workers': { type: 'string' },
    'wire-pairs': { type: 'string', default: '1' },
    requests: { type: 'string', default: '20000' },
    current: { type: 'string' },
    profile: { type: 'string' },
    'statement-log': { type: 'boolean', default: false },
    'pg-perf': { type: 'boolean', default: false },
    help: { type: 'boolean' },
  },
});
if (flags.help) {
  console.log(`usage: npm run bench -- [--scenario endpoints|dispatch|polls|idle|worker|fair|ledger|ledger-closing|lease-plan|retention|request-cost|statement-stats|cli|added-latency|worker-wire] [--backends postgres,pglite] [--database-url URL]
       [--duration S] [--warmup S] [--out FILE]
  endpoints: [--results N] [--nodes N] [--models N] [--days N] [--success F] [--seed N] [--connections N] [--keep]
             [--baseline DIR --rounds N [--only ENDPOINT]: against a built checkout, both up, alternating rounds (PostgreSQL)]
  dispatch:  [--workers W (64)] [--submitters S (32)] [--pairs 32,8 (queue-only runs, ours and pg-boss)]
             [--poll-workers W (32)] [--poll-submitters S (64)] [--baseline DIR (a built checkout to compare polling with)]
             [--variants (the dispatcher's hand-off and empty-model memory, on and off)]
  polls:     the seed's way of waiting alone (dispatch's poll mode): [--poll-workers W (32)] [--poll-submitters S (64)]
             [--baseline DIR (alternating with that checkout; then the dispatch cycle too, --workers, --submitters)]
             [--verify (verification on, its defaults, in every run: VERIFY=off otherwise)]
  idle:      [--idle N (5000 long-polling workers)]
  fair:      [--fair-workers W (16)] [--backlog N (5000)] [--service-ms MS (20)] [--light-rate R (1/s)] [--baseline DIR] (PostgreSQL)
  worker:    [--submitters S (32)] (the first of --backends)
  ledger-closing: [--closing-results N (1000000)] [--days N (90)] [--nodes N] [--models N] [--connections N] [--baseline DIR] (PostgreSQL)
  lease-plan: jobs_lease's plans, custom and generic, with [--queued N (100000) queued jobs] over [--models N] (PostgreSQL)
  ledger:    [--results N (credits of the closed day)] [--nodes N] [--models N] [--keep] (PostgreSQL)
  retention: [--jobs N (3000000: total_job_count's history)] [--window S (20: retention's window in the soak)]
             [--duration S (the soak)] [--workers W] [--submitters S] (PostgreSQL; pglite in --backends: the soak on the embedded database too)
  request-cost: server CPU per request (pending poll, empty get_job, submit): [--requests N (20000 a kind)] [--runs N (5)] [--baseline DIR]
             [--current DIR (another built checkout in this one's place)] (PostgreSQL)
  statement-stats: one dispatch cycle ([--workers W] [--submitters S] [--duration S]), PostgreSQL's time per job statement by
             statement from pg_stat_statements (where the server preloads it: bench/statement-stats.ts), rows written
             per table and WAL per job; [--pg-perf (PostgreSQL's CPU by function, from Linux perf: bench/pg-perf.ts)]
             [--client-mode poll (the seed's get_result every 20 ms instead of waits)] [--analyze (ANALYZE after the warm-up)]
             [--current DIR (another built checkout's server in this one's place)]
  cli:       [--runs N (5)] [--baseline DIR (alternating with that checkout)] (the embedded database)
  worker-wire: the dispatch cycle, workers on the seed's wire (get_job + update_result) against ins worker's (jobs/next),
             alternating: [--workers W (64)] [--submitters S (32)] [--max-jobs N (4: jobs/next's max_jobs)] [--wire-pairs N (1)]
             [--ins-workers W (the ins wire's workers; default --workers)]
--statement-log: PostgreSQL logs the duration of every statement in the bench's databases (log_min_duration_statement
= 0, set on each database); \`npx tsx bench/statement-log.ts --jobs N LOGFILE\` sums PostgreSQL's log by statement.
--profile DIR: every server the scenario starts writes a V8 CPU profile into DIR (node --cpu-prof), one file
per server in start order; \`npx tsx bench/profile-table.ts --jobs N FILE...\` sums them into a table.
PostgreSQL runs create and drop their own database on the server of --database-url (default
BENCH_DATABASE_URL or postgresql://postgres@127.0.0.1:5432/test).
endpoints --keep keeps the imported databases (PostgreSQL database ins_bench_<sizes>, embedded one
in bench-results/) and reuses them on the next run with the same sizes, skipping the import.`);
  process.exit(0);
}

const num = (k: keyof typeof flags): number => Number(flags[k]);
if (flags['statement-log']) process.env.BENCH_LOG_STATEMENTS = '1';
// Servers are started by bench/common.ts startServer, which passes these to node.
if (flags.profile)
  process.env.BENCH_SERVER_NODE_ARGS = `${process.env.BENCH_SERVER_NODE_ARGS ?? ''} --cpu-prof --cpu-prof-dir=${path.resolve(flags.profile)}`.trim();
const common = { duration: num('duration'), warmup: num('warmup'), backends: flags.backends, databaseUrl: flags['database-url'], out: flags.out };

async function main(): Promise<void> {
  switch (flags.scenario) {
    case 'endpoints': {
      const o = {
        ...common,
        history: {
          nodes: num('nodes'),
          models: num('models'),
          results: num('results'),
          days: num('days'),
          success: num('success'),
          seed: num('seed'),
        },
        connections: num('connections'),
        dataDir: flags['data-dir'],
        keep: flags.keep,
      };
      return flags.baseline ? endpointsAgainst(o, flags.baseline, num('rounds'), flags.only) : endpointsScenario(o);
    }
    case 'dispatch':
      return dispatchScenario({
        ...common,
        workers: num('workers'),
        submitters: num('submitters'),
        pairs: flags.pairs
          .split(',')
          .map(Number)
          .filter((n) => n > 0),
        pollWorkers: num('poll-workers'),
        pollSubmitters: num('poll-submitters'),
        baseline: flags.baseline,
        variants: flags.variants,
      });
    case 'polls':
      return pollsScenario({
        ...common,
        workers: num('workers'),
        submitters: num('submitters'),
        pollWorkers: num('poll-workers'),
        pollSubmitters: num('poll-submitters'),
        baseline: flags.baseline,
        verify: flags.verify,
      });
    case 'idle':
      return idleScenario({ ...common, idle: num('idle') });
    case 'worker':
      return workerScenario({ ...common, submitters: num('submitters') });
    case 'fair':
      return fairScenario({
        databaseUrl: flags['database-url'],
        warmup: num('warmup'),
        duration: num('duration'),
        out: flags.out,
        baseline: flags.baseline,
        workers: num('fair-workers'),
        backlog: num('backlog'),
        serviceMs: num('service-ms'),
        lightPerSecond: num('light-rate'),
      });
    case 'ledger':
      return ledgerScenario({
        databaseUrl: flags['database-url'],
        results: num('results'),
        nodes: num('nodes'),
        models: num('models'),
        out: flags.out,
        keep: flags.keep,
      });
    case 'ledger-closing':
      return ledgerClosingScenario({
        databaseUrl: flags['database-url'],
        results: num('closing-results'),
        days: num('days'),
        nodes: num('nodes'),
        models: num('models'),
        connections: num('connections'),
        window: 1,
        baseline: flags.baseline,
        out: flags.out,
      });
    case 'lease-plan':
      return leasePlanScenario({ databaseUrl: flags['database-url'], backlog: num('queued'), models: num('models'), rounds: 50 });
    case 'retention':
      return retentionScenario({
        databaseUrl: flags['database-url'],
        backends: flags.backends,
        jobs: num('jobs'),
        window: num('window'),
        duration: num('duration'),
        workers: num('workers'),
        submitters: num('submitters'),
        out: flags.out,
      });
    case 'request-cost':
      return requestCostScenario({
        databaseUrl: flags['database-url'],
        baseline: flags.baseline,
        requests: num('requests'),
        runs: num('runs'),
        out: flags.out,
        current: flags.current,
      });
    case 'statement-stats':
      if (flags['client-mode'] !== 'jobs' && flags['client-mode'] !== 'poll')
        throw new Error(`--client-mode is jobs or poll, got ${flags['client-mode']}`);
      return statementStatsScenario({
        databaseUrl: flags['database-url'],
        workers: num('workers'),
        submitters: num('submitters'),
        warmup: num('warmup'),
        duration: num('duration'),
        pgPerf: flags['pg-perf'],
        mode: flags['client-mode'],
        analyze: flags.analyze,
        current: flags.current,
      });
    case 'cli':
      return cliScenario({ runs: num('runs'), baseline: flags.baseline, out: flags.out });
    case 'worker-wire':
      return workerWireScenario({
        ...common,
        workers: num('workers'),
        submitters: num('submitters'),
        maxJobs: num('max-jobs'),
        insWorkers: flags['ins-workers'] === undefined ? undefined : num('ins-workers'),
        pairs: num('wire-pairs'),
      });
    case 'added-latency':
      return addedLatencyScenario({ backends: flags.backends, databaseUrl: flags['database-url'], rounds: num('rounds'), out: flags.out });
    default:
      throw new Error(
        `unknown scenario ${flags.scenario} (endpoints, dispatch, polls, idle, worker, fair, ledger, ledger-closing, lease-plan, retention, request-cost, statement-stats, cli, added-latency or worker-wire)`,
      );
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
