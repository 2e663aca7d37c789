// The statement-stats scenario (`npm run bench -- --scenario statement-stats`): one dispatch cycle
// (VERIFY=off, --workers, --submitters, --duration; --client-mode poll: the seed's polls) on PostgreSQL, and what each statement cost
// PostgreSQL per job, from pg_stat_statements: calls, planning and execution time, beside the
// CPU per job of the server, of PostgreSQL's processes and of the bench's own clients. Unlike
// --statement-log it adds no logging to what it measures. pg_stat_statements must be loaded by
// the server of --database-url (it is not by default):
//   ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements';
//   ALTER SYSTEM SET pg_stat_statements.track_planning = on;   -- after a restart, for planning times
// then restart PostgreSQL; the scenario creates the extension in its own database. The counters
// are reset after a warm-up, so only the measured seconds count (every database's statements
// are counted; run nothing else against that server meanwhile). Without it, the scenario prints the
// rows each table wrote per job and the WAL per job only. --pg-perf adds PostgreSQL's CPU by
// function from Linux perf over the measured seconds (bench/pg-perf.ts). `--current DIR` runs
// another built checkout's server and CLI in this one's place (e.g. the commit an issue was filed
// on), so two commits' statements are measured alike, one run after the other.
import path from 'node:path';
import {
  ENTRY,
  entryOf,
  adminQuery,
  freshDatabase,
  importBenchNodes,
  ins,
  metricTotal,
  postgresCpuSeconds,
  printRows,
  ROOT,
  startServer,
} from './common.js';
import { cycle, http, type ClientMode } from './cycle.js';
import { recordPerf } from './pg-perf.js';

export interface StatementStatsOptions {
  databaseUrl: string;
  workers: number;
  submitters: number;
  warmup: number;
  duration: number;
  pgPerf?: boolean;
  /** jobs (default): get_result with wait; poll: the seed's way, get_result every 20 ms (bench/polls.ts). */
  mode?: ClientMode;
  /** ANALYZE the database after the warm-up, as autovacuum would have by then (this machine's PostgreSQL runs without it). */
  analyze?: boolean;
  /** Another built checkout's server in this one's place (`--current DIR`): an older commit's statements, measured alike. */
  current?: string;
}

interface StatementRow {
  calls: string;
  plan: number;
  exec: number;
  rows: string;
  query: string;
}

export async function statementStatsScenario(o: StatementStatsOptions): Promise<void> {
  const loaded = (await adminQuery(o.databaseUrl, 'SHOW shared_preload_libraries')).rows[0] as { shared_preload_libraries: string };
  const statements = loaded.shared_preload_libraries
    .split(',')
    .map((s) => s.trim())
    .includes('pg_stat_statements');
  if (!statements)
    console.log(
      'pg_stat_statements is not loaded by this PostgreSQL (see bench/statement-stats.ts for the two settings and the restart): tables and WAL only',
    );
  const entry = o.current ? entryOf(o.current) : ENTRY;
  const db = await freshDatabase('postgres', o.databaseUrl, `ins_bench_statements_${process.pid}`);
  try {
    if (statements) await adminQuery(db.env.DATABASE_URL!, 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    const nodes = await importBenchNodes(db.env, 'stats-worker', o.workers, entry);
    const userKey = (await ins(['key', 'add-user', 'bench'], db.env, entry)).trim();
    const server = await startServer(
      db.env,
      19_000 + (process.pid % 400),
      path.join(ROOT, 'bench-results', 'server-statement-stats.log'),
      { VERIFY: 'off' },
      entry,
    );
    try {
      const h = http(server.url, o.workers + o.submitters + 8);
      await cycle(h, nodes, userKey, o.submitters, 0, o.warmup, o.mode);
      if (o.analyze) await adminQuery(db.env.DATABASE_URL!, 'ANALYZE');
      if (statements) await adminQuery(db.env.DATABASE_URL!, 'SELECT pg_stat_statements_reset()');
      await statsFlushed();
      const [tables0, wal0] = [await tableWrites(db.env.DATABASE_URL!), await walBytes(db.env.DATABASE_URL!)];
      const before = await (await fetch(`${server.url}/metrics`)).text();
      const postgresCpu = await postgresCpuSeconds(o.databaseUrl);
      const perf = o.pgPerf ? recordPerf(path.join(ROOT, 'bench-results', `statement-stats-${process.pid}.perf`)) : undefined;
      const [pg0, bench0] = [postgresCpu?.(), process.cpuUsage()];
      const run = await cycle(h, nodes, userKey, o.submitters, 0, o.duration, o.mode);
      const [pg1, bench] = [postgresCpu?.(), process.cpuUsage(bench0)];
      const shares = await perf?.stop();
      const wal1 = await walBytes(db.env.DATABASE_URL!);
      await statsFlushed();
      const tables1 = await tableWrites(db.env.DATABASE_URL!);
      const after = await (await fetch(`${server.url}/metrics`)).text();
      await h.pool.close();
      const jobs = Math.max(1, run.submitted);
      const ms = (seconds: number) => ((seconds * 1000) / jobs).toFixed(3);
      const serverSeconds = metricTotal(after, 'process_cpu_seconds_total') - metricTotal(before, 'process_cpu_seconds_total');
      console.log(
        `${o.mode === 'poll' ? "the seed's polls (get_result every 20 ms)" : 'dispatch cycle'}, VERIFY=off, ${o.workers} workers, ${o.submitters} submitters, ${o.duration} s: ${run.jobsPerSecond} jobs/s, ${run.submitted} jobs, lost ${run.lost}, duplicated ${run.duplicated}`,
      );
      console.log(
        `CPU per job, ms: server ${ms(serverSeconds)}, PostgreSQL ${pg0 === undefined || pg1 === undefined ? 'n/a' : ms(pg1 - pg0)}, the bench's clients ${ms((bench.user + bench.system) / 1e6)}`,
      );
      console.log(`WAL per job: ${((wal1 - wal0) / jobs).toFixed(0)} bytes`);
      printRows([
        ['table', 'inserted per job', 'updated per job', 'of them HOT', 'deleted per job'],
        ...[...tables1]
          .map(([name, t]) => {
            const t0 = tables0.get(name) ?? { ins: 0, upd: 0, hot: 0, del: 0 };
            return [name, (t.ins - t0.ins) / jobs, (t.upd - t0.upd) / jobs, (t.hot - t0.hot) / jobs, (t.del - t0.del) / jobs];
          })
          .filter((row) => (row.slice(1) as number[]).some((v) => v > 0.0005))
          .map(([name, ...v]) => [name as string, ...(v as number[]).map((x) => x.toFixed(3))]),
      ]);
      if (shares) {
        console.log(`PostgreSQL's samples (perf, 499 Hz, inclusive): ${shares.samples}, ${(shares.samples / jobs).toFixed(3)} per job`);
        printRows([['function', "share of PostgreSQL's samples"], ...[...shares].map(([f, v]) => [f, `${(v * 100).toFixed(1)} %`])]);
      }
      if (!statements) return;
      const r = await adminQuery(
        db.env.DATABASE_URL!,
        `SELECT calls::text, total_plan_time AS plan, total_exec_time AS exec, rows::text,
        left(regexp_replace(query, '\\s+', ' ', 'g'), 70) AS query FROM pg_stat_statements ORDER BY total_plan_time + total_exec_time DESC LIMIT 12`,
      );
      const per = (x: number) => ((x * 1000) / jobs).toFixed(1);
      printRows([
        ['calls per job', 'planning µs per job', 'execution µs per job', 'rows', 'statement'],
        ...(r.rows as StatementRow[]).map((s) => [(Number(s.calls) / jobs).toFixed(3), per(s.plan), per(s.exec), s.rows, s.query]),
      ]);
    } finally {
      await server.stop();
    }
  } finally {
    await db.cleanup();
  }
}

/** Idle backends report their table counters within PostgreSQL's idle stats interval (10 s in 15). */
const statsFlushed = () => new Promise((resolve) => setTimeout(resolve, 11_000));

interface TableWrites {
  ins: number;
  upd: number;
  hot: number;
  del: number;
}

/** Each table's rows inserted, updated (HOT among them) and deleted so far (pg_stat_user_tables; its counters lag by up to a stats flush). */
async function tableWrites(url: string): Promise<Map<string, TableWrites>> {
  const r = await adminQuery(
    url,
    'SELECT relname, n_tup_ins::float8 AS ins, n_tup_upd::float8 AS upd, n_tup_hot_upd::float8 AS hot, n_tup_del::float8 AS del FROM pg_stat_user_tables',
  );
  return new Map((r.rows as Array<TableWrites & { relname: string }>).map((t) => [t.relname, t]));
}

/** The WAL PostgreSQL has written, in bytes (the whole server's: run nothing else meanwhile). */
async function walBytes(url: string): Promise<number> {
  const r = await adminQuery(url, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8 AS b`);
  return (r.rows[0] as { b: number }).b;
}
