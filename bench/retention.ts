// The retention scenario (`npm run bench -- --scenario retention`), PostgreSQL only:
// (a) GET /total_job_count against the built server, with no job and with --jobs finished jobs
//     (default 3,000,000; 0 skips this part) written straight into PostgreSQL with one INSERT … SELECT
//     generate_series (the counters follow, through their trigger); the count the service made
//     before (a GROUP BY over jobs) is timed on the same table for comparison; and the bytes a
//     finished job takes in jobs;
// (b) a soak: the job cycle over HTTP (bench/cycle.ts) for --duration seconds on a fresh
//     database, with retention's window at --window seconds (bench/serve-retention.ts; looks
//     every 2 s), sampling the database's and the tables' sizes every 10 s. The ledger is marked
//     closed through today first, so that only the window bounds retention (in service, days
//     close after they end and the evidence window passes: the retained history is then the
//     window plus up to two days). With the server's autovacuum off, the soak vacuums the three
//     tables itself every 10 s. At the end: bytes per job kept and per tombstone;
// (c) the job cycle with the job counters' triggers and without them (jobs/s);
// (b') with pglite among --backends, first the soak on the embedded database (its data directory's size).
import { mkdirSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { sql } from '../src/db/database.js';
import { openPglite } from '../src/db/pglite.js';
import { adminQuery, freshDatabase, ins, percentile, printRows, ROOT, startServer } from './common.js';
import { cycle, http, MODEL } from './cycle.js';

export interface RetentionBenchOptions {
  databaseUrl: string;
  backends: string;
  jobs: number;
  window: number;
  duration: number;
  workers: number;
  submitters: number;
  out: string | undefined;
}

const MB = 1024 * 1024;

async function latencies(url: string, n: number): Promise<{ p50: number; p99: number; total: number }> {
  const ms: number[] = [];
  let total = 0;
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const res = await fetch(`${url}/total_job_count`);
    total = ((await res.json()) as { total_job_count: number }).total_job_count;
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  return { p50: percentile(ms, 50), p99: percentile(ms, 99), total };
}

async function counts(o: RetentionBenchOptions): Promise<string[][]> {
  const db = await freshDatabase('postgres', o.databaseUrl, `ins_bench_retention_counts_${process.pid}`);
  const rows: string[][] = [['jobs', 'total_job_count p50 ms', 'p99 ms', 'the old count(*) GROUP BY state, ms', 'jobs table MB', 'bytes per job']];
  try {
    await ins(['migrate'], db.env);
    const server = await startServer(db.env, 18_531, path.join(ROOT, 'bench-results', 'server-retention-counts.log'), { JOB_RETENTION: '0' });
    const client = new pg.Client({ connectionString: db.env.DATABASE_URL });
    await client.connect();
    try {
      const oldCount = async () => {
        const ms: number[] = [];
        for (let i = 0; i < 5; i++) {
          const t = performance.now();
          await client.query('SELECT state, count(*)::int AS n FROM jobs GROUP BY state');
          ms.push(performance.now() - t);
        }
        return ms.sort((a, b) => a - b)[2]!;
      };
      const size = async () => (await client.query<{ b: string }>("SELECT pg_total_relation_size('jobs')::text AS b")).rows[0]!.b;
      await latencies(server.url, 50);
      const empty = await latencies(server.url, 500);
      rows.push(['0', empty.p50.toFixed(2), empty.p99.toFixed(2), (await oldCount()).toFixed(2), (Number(await size()) / MB).toFixed(1), '']);
      const t = performance.now();
      await client.query(`INSERT INTO models (name) VALUES ('${MODEL}') ON CONFLICT DO NOTHING`);
      // Finished jobs of the last 30 days: a prompt and an answer of the bench's sizes (cycle.ts).
      await client.query(
        `INSERT INTO jobs (id, model_id, state, request, attempts, submitted_at, first_leased_at, deadline_at, node_id, finished_at, result, usage)
        SELECT md5(i::text)::uuid, (SELECT id FROM models WHERE name = '${MODEL}'), CASE WHEN i % 50 = 0 THEN 'expired' ELSE 'done' END,
          jsonb_build_object('messages', jsonb_build_array(jsonb_build_object('role', 'user', 'content', 'bench prompt ' || i || ': tell me something about ' || i * 7)),
            'max_output', 64, 'temperature', 0, 'seed', i),
          1, ts, ts, ts + interval '240 seconds', 1, ts + interval '2 seconds',
          jsonb_build_object('message', jsonb_build_object('role', 'assistant', 'content', repeat('light water river stone ', 12))),
          '{"prompt_tokens": 20, "completion_tokens": 50}'::jsonb
        FROM generate_series(1, $1::int) AS i, LATERAL (SELECT now() - make_interval(secs => 30 * 86400.0 * i / $1::int) AS ts) x`,
        [o.jobs],
      );
      await client.query('VACUUM ANALYZE jobs');
      console.log(`seeded ${o.jobs} jobs in ${((performance.now() - t) / 1000).toFixed(0)} s`);
      await latencies(server.url, 50);
      const full = await latencies(server.url, 500);
      if (full.total !== o.jobs) throw new Error(`total_job_count ${full.total}, expected ${o.jobs}`);
      const bytes = Number(await size());
      rows.push([
        String(o.jobs),
        full.p50.toFixed(2),
        full.p99.toFixed(2),
        (await oldCount()).toFixed(0),
        (bytes / MB).toFixed(0),
        (bytes / o.jobs).toFixed(0),
      ]);
    } finally {
      await client.end();
      await server.stop();
    }
  } finally {
    await db.cleanup();
  }
  return rows;
}

interface Sample {
  at: number;
  database: number;
  jobs: number;
  leases: number;
  results: number;
  kept: number;
  tombstones: number;
  total: number;
}

async function soak(o: RetentionBenchOptions): Promise<{ samples: Sample[]; jobsPerSecond: number; sizing: string[][] }> {
  const db = await freshDatabase('postgres', o.databaseUrl, `ins_bench_retention_soak_${process.pid}`);
  try {
    await ins(['migrate'], db.env);
    await adminQuery(db.env.DATABASE_URL!, "UPDATE ledger_state SET closed_through = (now() AT TIME ZONE 'UTC')::date");
    const nodes = await Promise.all(
      Array.from({ length: o.workers }, async (_, i) => ({ name: `soak-${i}`, key: (await ins(['node', 'add', `soak-${i}`], db.env)).trim() })),
    );
    const userKey = (await ins(['key', 'add-user', 'soak'], db.env)).trim();
    const server = await startServer(
      db.env,
      18_532,
      path.join(ROOT, 'bench-results', 'server-retention-soak.log'),
      { VERIFY: 'off', BENCH_RETENTION_SECONDS: String(o.window), BENCH_RETENTION_EVERY: '2' },
      ['--import', 'tsx', path.join(ROOT, 'bench', 'serve-retention.ts')],
    );
    const client = new pg.Client({ connectionString: db.env.DATABASE_URL });
    await client.connect();
    const samples: Sample[] = [];
    const started = performance.now();
    const sample = async () => {
      const {
        rows: [r],
      } = await client.query<Record<string, string>>(`SELECT pg_database_size(current_database())::text AS database,
          pg_total_relation_size('jobs')::text AS jobs, pg_total_relation_size('job_leases')::text AS leases, pg_total_relation_size('job_results')::text AS results,
          (SELECT count(*) FROM jobs)::text AS kept, (SELECT count(*) FROM job_results WHERE result = 'null'::jsonb)::text AS tombstones,
          (SELECT sum(jobs) FROM job_counts)::text AS total`);
      samples.push({
        at: Math.round((performance.now() - started) / 1000),
        database: Number(r!.database),
        jobs: Number(r!.jobs),
        leases: Number(r!.leases),
        results: Number(r!.results),
        kept: Number(r!.kept),
        tombstones: Number(r!.tombstones),
        total: Number(r!.total ?? 0),
      });
    };
    // A server with autovacuum off (this machine's is) never reclaims a deleted row: the soak then
    // does autovacuum's work on the three tables itself, after each sample.
    const autovacuum = (await client.query<{ autovacuum: string }>('SHOW autovacuum')).rows[0]!.autovacuum === 'on';
    if (!autovacuum) console.log('autovacuum is off on this server: the soak runs VACUUM jobs, job_leases, job_results every 10 s instead');
    let stop = false;
    const sampler = (async () => {
      while (!stop) {
        await sample();
        if (!autovacuum) await client.query('VACUUM jobs, job_leases, job_results');
        await new Promise((r) => setTimeout(r, 10_000));
      }
    })();
    let jobsPerSecond = 0;
    try {
      const h = http(server.url, o.workers + o.submitters + 8);
      const run = await cycle(h, nodes, userKey, o.submitters, 0, o.duration);
      jobsPerSecond = run.jobsPerSecond;
      await h.pool.close();
    } finally {
      stop = true;
      await sampler;
      await sample();
    }
    await server.stop();
    // Bytes per job as stored, once the tables are compacted (VACUUM FULL): a finished job within
    // the window (its jobs row and lease with their indexes, its job_results row with the body,
    // its share of job_results' indexes) and a tombstone after it (the job_results row with the
    // hash and its share of the indexes that keep it). A row is its pg_column_size (tuple header
    // included) and a 4-byte line pointer.
    await client.query('VACUUM FULL jobs, job_leases, job_results');
    const {
      rows: [z],
    } = await client.query<Record<string, number>>(`WITH n AS (SELECT (SELECT count(*) FROM jobs) AS jobs,
        (SELECT count(*) FROM job_results) AS results, (SELECT count(*) FROM job_results WHERE result <> 'null'::jsonb) AS bodies)
      SELECT n.jobs::float8 AS jobs, n.results::float8 AS results,
        (pg_total_relation_size('jobs') + pg_total_relation_size('job_leases'))::float8 / greatest(n.jobs, 1) AS job_and_leases,
        (SELECT avg(pg_column_size(r.*)) + 4 FROM job_results r WHERE result <> 'null'::jsonb)::float8 AS body_row,
        (SELECT avg(pg_column_size(r.*)) + 4 FROM job_results r WHERE result = 'null'::jsonb)::float8 AS tombstone_row,
        (SELECT sum(pg_relation_size(indexrelid)) FROM pg_index WHERE indrelid = 'job_results'::regclass AND indexrelid <> 'job_results_kept_bodies'::regclass)::float8
          / greatest(n.results, 1) AS result_indexes,
        pg_relation_size('job_results_kept_bodies')::float8 / greatest(n.bodies, 1) AS kept_index
      FROM n`);
    await client.end();
    const kept = z!.job_and_leases! + z!.body_row! + z!.result_indexes! + z!.kept_index!;
    const tombstone = z!.tombstone_row! + z!.result_indexes!;
    const sizing = [
      ['bytes per job (compacted)', 'bytes', 'of which'],
      [
        'within the window',
        kept.toFixed(0),
        `jobs + job_leases with indexes ${z!.job_and_leases!.toFixed(0)}, job_results row with body ${z!.body_row!.toFixed(0)}, indexes ${(z!.result_indexes! + z!.kept_index!).toFixed(0)}`,
      ],
      ['after it (tombstone)', tombstone.toFixed(0), `job_results row ${z!.tombstone_row!.toFixed(0)}, indexes ${z!.result_indexes!.toFixed(0)}`],
    ];
    return { samples, jobsPerSecond, sizing };
  } finally {
    await db.cleanup();
  }
}

/** Bytes of the files under `dir`. */
function diskUsage(dir: string): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) total += diskUsage(p);
    else if (e.isFile()) total += statSync(p).size;
  }
  return total;
}

/**
 * (b') the same soak on the embedded database (PGlite has no autovacuum: retention vacuums the
 * three tables after each look that deleted rows): the data directory's size every 10 s, then the
 * tables, read with the server stopped.
 */
async function soakEmbedded(o: RetentionBenchOptions): Promise<string[][]> {
  const db = await freshDatabase('pglite', o.databaseUrl, 'unused');
  const dir = db.env.DATA_DIR!;
  try {
    await ins(['migrate'], db.env);
    const direct = await openPglite(dir);
    await direct.query(sql('bench_close_ledger', "UPDATE ledger_state SET closed_through = (now() AT TIME ZONE 'UTC')::date"));
    await direct.close();
    const nodes: { name: string; key: string }[] = [];
    for (let i = 0; i < o.workers; i++) nodes.push({ name: `soak-${i}`, key: (await ins(['node', 'add', `soak-${i}`], db.env)).trim() });
    const userKey = (await ins(['key', 'add-user', 'soak'], db.env)).trim();
    const server = await startServer(
      db.env,
      18_534,
      path.join(ROOT, 'bench-results', 'server-retention-soak-embedded.log'),
      { VERIFY: 'off', BENCH_RETENTION_SECONDS: String(o.window), BENCH_RETENTION_EVERY: '2' },
      ['--import', 'tsx', path.join(ROOT, 'bench', 'serve-retention.ts')],
    );
    const rows: string[][] = [['s', 'data directory MB', 'of which pg_wal MB', 'jobs ever']];
    const started = performance.now();
    let stop = false;
    const sample = async () => {
      const total = ((await (await fetch(`${server.url}/total_job_count`)).json()) as { total_job_count: number }).total_job_count;
      rows.push([
        String(Math.round((performance.now() - started) / 1000)),
        (diskUsage(dir) / MB).toFixed(1),
        (diskUsage(path.join(dir, 'pg_wal')) / MB).toFixed(1),
        String(total),
      ]);
    };
    const sampler = (async () => {
      while (!stop) {
        await sample();
        await new Promise((r) => setTimeout(r, 10_000));
      }
    })();
    let jobsPerSecond = 0;
    try {
      const h = http(server.url, o.workers + o.submitters + 8);
      jobsPerSecond = (await cycle(h, nodes, userKey, o.submitters, 0, o.duration)).jobsPerSecond;
      await h.pool.close();
    } finally {
      stop = true;
      await sampler;
      await sample();
      await server.stop();
    }
    const after = await openPglite(dir);
    const [t] = await after.query<Record<string, number>>(
      sql(
        'bench_tables',
        `SELECT (SELECT count(*) FROM jobs)::int AS kept,
        (SELECT count(*) FROM job_results WHERE result = 'null'::jsonb)::int AS tombstones,
        pg_total_relation_size('jobs')::float8 / 1048576 AS jobs_mb, pg_total_relation_size('job_leases')::float8 / 1048576 AS leases_mb,
        pg_total_relation_size('job_results')::float8 / 1048576 AS results_mb`,
      ),
    );
    await after.close();
    rows.push([
      'end',
      '',
      `jobs ${t!.jobs_mb!.toFixed(1)} MB, job_leases ${t!.leases_mb!.toFixed(1)} MB, job_results ${t!.results_mb!.toFixed(1)} MB`,
      `${t!.kept} kept, ${t!.tombstones} tombstones, ${jobsPerSecond} jobs/s`,
    ]);
    return rows;
  } finally {
    await db.cleanup();
  }
}

/**
 * (c) What the counters' triggers cost the job cycle: runs of --duration/4 seconds (at least 15)
 * with the triggers and without (dropped between runs, then made again), on-off-off-on.
 */
async function triggerCost(o: RetentionBenchOptions): Promise<string[][]> {
  const db = await freshDatabase('postgres', o.databaseUrl, `ins_bench_retention_triggers_${process.pid}`);
  try {
    await ins(['migrate'], db.env);
    const nodes = await Promise.all(
      Array.from({ length: o.workers }, async (_, i) => ({ name: `ab-${i}`, key: (await ins(['node', 'add', `ab-${i}`], db.env)).trim() })),
    );
    const userKey = (await ins(['key', 'add-user', 'ab'], db.env)).trim();
    const server = await startServer(db.env, 18_533, path.join(ROOT, 'bench-results', 'server-retention-triggers.log'), {
      VERIFY: 'off',
      JOB_RETENTION: '0',
    });
    const seconds = Math.max(15, Math.round(o.duration / 4));
    const runs: Record<'on' | 'off', number[]> = { on: [], off: [] };
    try {
      for (const mode of ['on', 'off', 'off', 'on'] as const) {
        const url = db.env.DATABASE_URL!;
        if (mode === 'off') {
          await adminQuery(url, 'DROP TRIGGER IF EXISTS job_counts_inserted ON jobs');
          await adminQuery(url, 'DROP TRIGGER IF EXISTS job_counts_updated ON jobs');
        } else {
          await adminQuery(
            url,
            `CREATE OR REPLACE TRIGGER job_counts_inserted AFTER INSERT ON jobs
            REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION job_counts_inserted()`,
          );
          await adminQuery(
            url,
            `CREATE OR REPLACE TRIGGER job_counts_updated AFTER UPDATE ON jobs
            REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION job_counts_updated()`,
          );
        }
        const h = http(server.url, o.workers + o.submitters + 8);
        runs[mode].push((await cycle(h, nodes, userKey, o.submitters, 2, seconds)).jobsPerSecond);
        await h.pool.close();
      }
    } finally {
      await server.stop();
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    return [
      ['counters', 'jobs/s (runs)', 'mean'],
      ['triggers on', runs.on.join(', '), mean(runs.on).toFixed(0)],
      ['triggers off', runs.off.join(', '), mean(runs.off).toFixed(0)],
      ['kept', '', `${((100 * mean(runs.on)) / mean(runs.off)).toFixed(1)} %`],
    ];
  } finally {
    await db.cleanup();
  }
}

export async function retentionScenario(o: RetentionBenchOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  const backends = o.backends.split(',');
  if (backends.includes('pglite')) {
    console.log(`(b') soak on the embedded database: ${o.workers} workers, ${o.submitters} clients, ${o.duration} s, retention window ${o.window} s`);
    printRows(await soakEmbedded(o));
    if (!backends.includes('postgres')) return;
  }
  if (o.jobs > 0) {
    console.log(`(a) total_job_count, 0 and ${o.jobs} jobs`);
    printRows(await counts(o));
  }
  console.log(`\n(b) soak: ${o.workers} workers, ${o.submitters} clients, ${o.duration} s, retention window ${o.window} s`);
  const b = await soak(o);
  printRows([
    ['s', 'database MB', 'jobs MB', 'job_leases MB', 'job_results MB', 'jobs kept', 'tombstones', 'jobs ever'],
    ...b.samples.map((s) => [
      String(s.at),
      (s.database / MB).toFixed(1),
      (s.jobs / MB).toFixed(1),
      (s.leases / MB).toFixed(1),
      (s.results / MB).toFixed(1),
      String(s.kept),
      String(s.tombstones),
      String(s.total),
    ]),
  ]);
  console.log(`${b.jobsPerSecond.toFixed(0)} jobs/s`);
  printRows(b.sizing);
  console.log(`\n(c) the job counters' triggers on the job cycle: ${o.workers} workers, ${o.submitters} clients`);
  printRows(await triggerCost(o));
}
