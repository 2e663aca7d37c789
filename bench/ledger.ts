// The ledger scenario (`npm run bench -- --scenario ledger`): closing a day of --results credits
// (default 5,000,000 over --nodes nodes, 0.1 % of them reversed) with the built `ins ledger
// close` in a process of its own — its time and peak RSS (target: under 2 minutes, memory
// bounded) — then `ins ledger verify --server` of one node's last 30 closed days over HTTP
// (target: under 1 s), the node having 2,500 credits on each of them. The history is written
// straight into PostgreSQL with generate_series (minutes faster than an import), aggregates
// included; PostgreSQL only.
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { hashKey } from '../src/keys.js';
import { freshDatabase, ins, printRows, ROOT, startServer } from './common.js';

export interface LedgerBenchOptions {
  databaseUrl: string;
  results: number;
  nodes: number;
  models: number;
  out: string | undefined;
  keep: boolean;
}

const NODE_KEY = 'nk_bench-ledger-node-key-0123456789abcdefghijklmnopq';
const READER_KEY = 'rk_bench-ledger-reader-key-0123456789abcdefghijklm';
const PER_NODE_DAY = 2_500;

/**
 * CPU seconds the PostgreSQL backends of connections named `app` (application_name) used while
 * `run` ran: sampled from /proc every half second (the database is on this machine).
 */
async function backendCpu<T>(databaseUrl: string, app: string, run: () => Promise<T>): Promise<{ result: T; seconds: number }> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const seen = new Map<number, number>();
  const sample = async () => {
    const { rows } = await client.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [app]);
    for (const { pid } of rows) {
      try {
        const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
        seen.set(pid, (Number(f[11]) + Number(f[12])) / 100);
      } catch {
        // gone
      }
    }
  };
  let done = false;
  const sampler = (async () => {
    while (!done) {
      await sample();
      await new Promise((r) => setTimeout(r, 500));
    }
  })();
  try {
    const result = await run();
    return { result, seconds: [...seen.values()].reduce((a, b) => a + b, 0) };
  } finally {
    done = true;
    await sampler;
    await client.end();
  }
}

/** `ins ARGS` in a process of its own: wall time, its CPU and the process's peak RSS. */
function measured(args: string[], env: NodeJS.ProcessEnv): Promise<{ seconds: number; cpu: number; maxRssMb: number; out: string; code: number }> {
  // The CLI's own main(), then the process's peak resident memory (getrusage) on stderr.
  const script = `const { main } = await import(${JSON.stringify(path.join(ROOT, 'dist', 'cli', 'main.js'))});
const code = await main(${JSON.stringify(args)});
const u = process.resourceUsage();
process.stderr.write('\\nmaxrss ' + u.maxRSS + ' cpu ' + (u.userCPUTime + u.systemCPUTime) + '\\n');
process.exit(code);`;
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      const seconds = (performance.now() - started) / 1000;
      const m = /maxrss (\d+) cpu (\d+)/.exec(err);
      if (code !== 0 && code !== 1) return reject(new Error(`ins ${args.join(' ')} exited ${code}: ${err}`));
      resolve({ seconds, cpu: Number(m?.[2] ?? NaN) / 1e6, maxRssMb: Number(m?.[1] ?? NaN) / 1024, out, code: code ?? 1 });
    });
  });
}

export async function ledgerScenario(o: LedgerBenchOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  const db = await freshDatabase('postgres', o.databaseUrl, `ins_bench_ledger_${process.pid}`);
  const rows = [['measure', 'value', 'target']];
  const load = () =>
    loadavg()
      .map((l) => l.toFixed(1))
      .join(' ');
  console.log(`load average at start: ${load()} (2 cores, shared)`);
  try {
    await ins(['migrate'], db.env);
    const client = new pg.Client({ connectionString: db.env.DATABASE_URL });
    await client.connect();
    const t0 = performance.now();
    // Days: the big one 32 days ago, then 29 small ones (3 to 31 days ago) in which node 1 has
    // PER_NODE_DAY credits and every other node 5. Node 1 is the verified node, with its key.
    await client.query(
      `INSERT INTO nodes (name, key_hash) SELECT 'bench-node-' || lpad(g::text, 5, '0'),
      CASE WHEN g = 1 THEN $2::text ELSE encode(sha256(('bench-ledger-' || g)::bytea), 'hex') END FROM generate_series(1, $1::int) g`,
      [o.nodes, hashKey(NODE_KEY)],
    );
    await client.query(`INSERT INTO api_keys (label, key_hash, kind) VALUES ('bench', $1::text, 'reader')`, [hashKey(READER_KEY)]);
    await client.query(`INSERT INTO models (name) SELECT 'bench-model-' || lpad(g::text, 2, '0') || ':latest' FROM generate_series(1, $1::int) g`, [
      o.models,
    ]);
    await client.query('SET statement_timeout = 0');
    await client.query(
      `INSERT INTO job_results (job_id, node_id, model_id, status, result, points, received_at)
      SELECT 'big-' || g, 1 + g % $2::int, 1 + (g * 7) % $3::int, 'success', '{}', 1,
        date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '32 days' + make_interval(secs => g * 86399.0 / $1::int)
      FROM generate_series(0, $1::int - 1) g`,
      [o.results, o.nodes, o.models],
    );
    await client.query(
      `INSERT INTO job_results (job_id, node_id, model_id, status, result, points, received_at)
      SELECT 'small-' || d || '-' || g, CASE WHEN g < $1::int THEN 1 ELSE 2 + (g - $1::int) / 5 END, 1 + g % $3::int, 'success', '{}', 1.5,
        date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - make_interval(days => d) + make_interval(secs => g * 86399.0 / ($1::int + ($2::int - 1) * 5))
      FROM generate_series(3, 31) d, generate_series(0, $1::int + ($2::int - 1) * 5 - 1) g`,
      [PER_NODE_DAY, o.nodes, o.models],
    );
    // 0.1 % of the big day reversed while it was open, as verification would.
    await client.query(`WITH v AS (UPDATE job_results SET status = 'reversed' WHERE job_id LIKE 'big-%' AND substr(job_id, 5)::bigint % 1000 = 0
        RETURNING job_id, node_id, model_id, points, received_at)
      INSERT INTO point_reversals (job_id, node_id, model_id, points, day, reason, reversed_at)
      SELECT job_id, node_id, model_id, points, (received_at AT TIME ZONE 'UTC')::date, 'bench', received_at + interval '1 minute' FROM v`);
    await client.query(`INSERT INTO node_daily_points (node_id, day, points, successes)
      SELECT node_id, (received_at AT TIME ZONE 'UTC')::date, sum(points), count(*) FROM job_results WHERE status = 'success' GROUP BY 1, 2`);
    await client.query(
      `INSERT INTO model_nodes SELECT model_id, node_id, min(received_at), max(received_at) FROM job_results WHERE status = 'success' GROUP BY 1, 2`,
    );
    await client.query(`INSERT INTO model_node_days SELECT model_id, node_id, (received_at AT TIME ZONE 'UTC')::date, min(received_at), max(received_at)
      FROM job_results WHERE status = 'success' GROUP BY 1, 2, 3`);
    await client.query('VACUUM ANALYZE job_results');
    await client.query('ANALYZE');
    const [{ n }] = (await client.query<{ n: number }>('SELECT count(*)::int AS n FROM job_results')).rows as [{ n: number }];
    await client.end();
    console.log(`history: ${n.toLocaleString('en')} results written in ${((performance.now() - t0) / 1000).toFixed(0)} s`);

    // The big day alone (a window of 31 days makes only it due), then the 29 small ones.
    const app = `ins-bench-close-${process.pid}`;
    const { result: big, seconds: pgCpu } = await backendCpu(db.env.DATABASE_URL!, app, () =>
      measured(['ledger', 'close', '--json'], { ...db.env, VERIFY_EVIDENCE_WINDOW: `${31 * 24}h`, LOG_LEVEL: 'warn', PGAPPNAME: app }),
    );
    const closedBig = JSON.parse(big.out) as { closed: string[] };
    if (closedBig.closed.length !== 1) throw new Error(`expected one day closed, got ${big.out}`);
    rows.push([`close a day of ${o.results.toLocaleString('en')} credits (${o.nodes} nodes): time`, `${big.seconds.toFixed(1)} s`, '< 120 s']);
    rows.push(['  CPU: the process, its PostgreSQL backends', `${big.cpu.toFixed(1)} s + ${pgCpu.toFixed(1)} s`, '']);
    rows.push(['  peak RSS of that process', `${big.maxRssMb.toFixed(0)} MB`, 'bounded']);
    const small = await measured(['ledger', 'close', '--json'], { ...db.env, LOG_LEVEL: 'warn' });
    rows.push([
      `close 29 days of ${(PER_NODE_DAY + (o.nodes - 1) * 5).toLocaleString('en')} credits each`,
      `${small.seconds.toFixed(1)} s (peak RSS ${small.maxRssMb.toFixed(0)} MB)`,
      '',
    ]);

    const server = await startServer(db.env, 19_700 + (process.pid % 200), path.join(ROOT, 'bench-results', 'server-ledger.log'));
    try {
      // Wall time of the whole command (a fresh process), its own CPU, and the server's CPU meanwhile.
      const serverCpu = () => {
        const f = readFileSync(`/proc/${server.child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
        return (Number(f[11]) + Number(f[12])) / 100;
      };
      const verify = async (args: string[]) => {
        const runs: { wall: number; cpu: number; server: number }[] = [];
        let last = '';
        for (let i = 0; i < 5; i++) {
          const before = serverCpu();
          const r = await measured(['ledger', 'verify', '--server', server.url, ...args], { ...process.env, LOG_LEVEL: 'warn' });
          if (r.code !== 0) throw new Error(`ins ledger verify failed: ${r.out}`);
          runs.push({ wall: r.seconds, cpu: r.cpu, server: serverCpu() - before });
          last = r.out.trim().split('\n')[0]!;
        }
        const median = (k: 'wall' | 'cpu' | 'server') => runs.map((r) => r[k]).sort((a, b) => a - b)[2]!;
        return {
          text: `${median('wall').toFixed(2)} s (CPU: its own ${median('cpu').toFixed(2)} s, the server's ${median('server').toFixed(2)} s; medians of 5)`,
          last,
        };
      };
      const node = await verify(['--node', 'bench-node-00001', '--key', NODE_KEY, '--days', '30']);
      rows.push([`ins ledger verify --node, 30 days (${PER_NODE_DAY.toLocaleString('en')} entries a day), whole process`, node.text, '< 1 s']);
      const pub = await verify(['--days', '30']);
      rows.push(['ins ledger verify (public: signatures, chain, per-node totals), 30 days', pub.text, '']);
      console.log(node.last);
    } finally {
      await server.stop();
    }
    printRows(rows);
    console.log(`load average at end: ${load()}`);
  } finally {
    if (o.keep) console.log(`kept: DATABASE_URL=${db.env.DATABASE_URL} (node bench-node-00001, key ${NODE_KEY}; reader ${READER_KEY})`);
    else await db.cleanup();
  }
}
