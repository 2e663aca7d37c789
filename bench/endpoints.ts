// The endpoints scenario (the default of `npm run bench`): imports a deterministic synthetic
// history with `ins import`, starts the built server in production mode, and drives each
// endpoint with autocannon: update_result with fresh job ids, daily_points for random nodes
// (last_days 30), unique_nodes for random models over 1, 7 and 30-day windows, and /healthz as
// the ceiling of the same server. Prints a table per backend and writes everything to a JSON file.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { ensureHistory, modelName, nodeKey, nodeName, Random, type HistoryOptions } from './history.js';
import { ins, parseBackends, printRows, ROOT, startServer, timed } from './common.js';

export interface EndpointsOptions {
  history: HistoryOptions;
  duration: number;
  warmup: number;
  connections: number;
  backends: string;
  databaseUrl: string;
  dataDir: string;
  out: string | undefined;
  keep: boolean;
}

interface EndpointResult {
  endpoint: string;
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  ratio?: number;
}
interface BackendResult {
  backend: string;
  import_nodes_s: number;
  import_results_s: number;
  endpoints: EndpointResult[];
}

export type Setup = (req: { method?: string; path?: string; headers?: Record<string, string>; body?: string }) => typeof req;

export async function load(url: string, setupRequest: Setup, method: 'GET' | 'POST', seconds: number, connections: number) {
  return autocannon({
    url,
    connections,
    duration: seconds,
    requests: [{ method, setupRequest: setupRequest as never }],
  });
}

export function scenarios(opts: HistoryOptions, runId: string): [string, 'GET' | 'POST', Setup][] {
  const rnd = new Random(opts.seed + 99);
  let n = 0;
  const window =
    (days: number): Setup =>
    (req) => {
      const now = Date.now();
      const start = new Date(now - days * 86_400_000).toISOString();
      return {
        ...req,
        path: `/unique_nodes?model_name=${encodeURIComponent(modelName(rnd.int(opts.models)))}&start_date=${start}&end_date=${new Date(now).toISOString()}`,
      };
    };
  return [
    ['ceiling (GET /healthz)', 'GET', (req) => ({ ...req, path: '/healthz' })],
    [
      'update_result',
      'POST',
      (req) => {
        const i = rnd.int(opts.nodes);
        const ok = rnd.next() < opts.success;
        return {
          ...req,
          path: '/worker/update_result',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            job_id: `${runId}-${n++}`,
            api_key: nodeKey(opts.seed, i),
            model_name: modelName(rnd.int(opts.models)),
            result: { message: 'benchmark output' },
            status: ok ? 'success' : 'error',
          }),
        };
      },
    ],
    [
      'daily_points (30 days)',
      'POST',
      (req) => {
        const i = rnd.int(opts.nodes);
        return {
          ...req,
          path: '/daily_points',
          headers: { 'content-type': 'application/json', api_key: nodeKey(opts.seed, i) },
          body: JSON.stringify({ node_name: nodeName(i), last_days: 30 }),
        };
      },
    ],
    ['unique_nodes (1 day)', 'GET', window(1)],
    ['unique_nodes (7 days)', 'GET', window(7)],
    ['unique_nodes (30 days)', 'GET', window(30)],
  ];
}

async function markImported(env: NodeJS.ProcessEnv): Promise<void> {
  if (env.DATA_DIR) return writeFileSync(path.join(env.DATA_DIR, 'imported'), '');
  const c = new pg.Client({ connectionString: env.DATABASE_URL });
  await c.connect();
  await c.query(`COMMENT ON DATABASE ${new URL(env.DATABASE_URL!).pathname.slice(1)} IS 'imported'`);
  await c.end();
}

async function benchBackend(
  o: EndpointsOptions,
  backend: string,
  files: { nodesFile: string; resultsFile: string },
  port: number,
): Promise<BackendResult> {
  const { history: opts, warmup, duration, connections } = o;
  const flags = { keep: o.keep, 'database-url': o.databaseUrl };
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.DATABASE_URL;
  delete env.DATA_DIR;
  const kept = `ins_bench_${opts.nodes}n_${opts.models}m_${opts.results}r_${opts.days}d_s${opts.seed}`;
  let imported = false;
  let cleanup = async () => {};
  if (backend === 'postgres') {
    const name = flags.keep ? kept : `ins_bench_${process.pid}`;
    const admin = new pg.Client({ connectionString: flags['database-url'] });
    await admin.connect();
    // A kept database is marked by a comment once its import has completed.
    if (flags.keep) {
      const marked = await admin.query(`SELECT 1 FROM pg_database WHERE datname = $1 AND shobj_description(oid, 'pg_database') = 'imported'`, [name]);
      imported = marked.rowCount === 1;
    }
    if (!imported) {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.query(`CREATE DATABASE ${name}`);
    }
    await admin.end();
    const url = new URL(flags['database-url']);
    url.pathname = `/${name}`;
    env.DATABASE_URL = url.toString();
    if (!flags.keep) {
      cleanup = async () => {
        const c = new pg.Client({ connectionString: flags['database-url'] });
        await c.connect();
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        await c.end();
      };
    }
  } else if (flags.keep) {
    const dir = path.join(ROOT, 'bench-results', kept);
    imported = existsSync(path.join(dir, 'imported'));
    if (!imported) rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    env.DATA_DIR = dir;
  } else {
    const dir = mkdtempSync(path.join(tmpdir(), 'ins-bench-'));
    env.DATA_DIR = dir;
    cleanup = () => Promise.resolve(rmSync(dir, { recursive: true, force: true }));
  }
  try {
    let importNodes = 0;
    let importResults = 0;
    if (imported) {
      console.log(`\n== ${backend}: reusing the kept import (${kept})`);
    } else {
      console.log(`\n== ${backend}: importing ${opts.nodes} nodes and ${opts.results.toLocaleString('en')} results`);
      // Only `ins migrate` and `ins serve` migrate a PostgreSQL database (docs/cli.md); not timed.
      await ins(['migrate'], env);
      importNodes = await timed(() => ins(['import', 'nodes', files.nodesFile], env));
      importResults = await timed(() => ins(['import', 'results', files.resultsFile], env));
      if (flags.keep) await markImported(env);
    }
    const server = await startServer(env, port, path.join(ROOT, 'bench-results', `server-${backend}.log`));
    const endpoints: EndpointResult[] = [];
    try {
      for (const [endpoint, method, setup] of scenarios(opts, `bench-${backend}-${Date.now()}`)) {
        if (warmup > 0) await load(server.url, setup, method, warmup, connections);
        const r = await load(server.url, setup, method, duration, connections);
        const result = {
          endpoint,
          rps: Math.round(r.requests.average),
          p50: r.latency.p50,
          p99: r.latency.p99,
          errors: r.errors + r.timeouts + r.non2xx,
        };
        endpoints.push(result);
        console.log(
          `   ${endpoint.padEnd(24)} ${String(result.rps).padStart(7)} req/s  p50 ${result.p50} ms  p99 ${result.p99} ms  errors ${result.errors}`,
        );
      }
    } finally {
      await server.stop();
    }
    const ceiling = endpoints[0]!.rps;
    for (const e of endpoints) e.ratio = Math.round((e.rps / ceiling) * 100) / 100;
    return { backend, import_nodes_s: importNodes, import_results_s: importResults, endpoints };
  } finally {
    await cleanup();
  }
}

// Targets of issue 5 (PostgreSQL, 5M results, 32 connections, 2 cores).
const TARGETS: Record<string, { rps: number; p99: number }> = {
  update_result: { rps: 3000, p99: 30 },
  'daily_points (30 days)': { rps: 8000, p99: 10 },
  'unique_nodes (30 days)': { rps: 1000, p99: 50 },
};

function printTable(o: EndpointsOptions, results: BackendResult[]): void {
  const { history: opts, duration, connections } = o;
  console.log(
    `\nresults: ${opts.results.toLocaleString('en')} over ${opts.days} days, ${opts.nodes} nodes, ${opts.models} models; ${connections} connections, ${duration} s per endpoint; ${cpus().length} cores, Node ${process.version}`,
  );
  const rows = [['backend', 'endpoint', 'req/s', 'p50 ms', 'p99 ms', 'errors', 'vs ceiling', 'target (postgres)']];
  for (const b of results) {
    for (const e of b.endpoints) {
      const t = TARGETS[e.endpoint];
      const verdict =
        t && b.backend === 'postgres' ? `${e.rps >= t.rps && e.p99 <= t.p99 && e.errors === 0 ? 'met' : 'MISSED'} (≥${t.rps}, p99 ≤${t.p99})` : '';
      rows.push([b.backend, e.endpoint, String(e.rps), String(e.p50), String(e.p99), String(e.errors), e.ratio!.toFixed(2), verdict]);
    }
    if (b.import_results_s > 0)
      rows.push([
        b.backend,
        `import: nodes ${b.import_nodes_s.toFixed(1)} s, results ${b.import_results_s.toFixed(1)} s (${Math.round(opts.results / b.import_results_s).toLocaleString('en')} rows/s)`,
        '',
        '',
        '',
        '',
        '',
        '',
      ]);
  }
  printRows(rows);
}

export async function endpointsScenario(o: EndpointsOptions): Promise<void> {
  const { history: opts, duration, connections } = o;
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  const now = Math.floor(Date.now() / 3_600_000) * 3_600_000;
  console.log('generating history (cached between runs)…');
  const files = await ensureHistory(path.resolve(ROOT, o.dataDir), opts, now);
  const results: BackendResult[] = [];
  let port = 18_000 + (process.pid % 1000);
  for (const backend of parseBackends(o.backends)) results.push(await benchBackend(o, backend, files, port++));
  printTable(o, results);
  const out = o.out ?? path.join(ROOT, 'bench-results', `bench-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(out, JSON.stringify({ options: opts, duration, connections, cores: cpus().length, node: process.version, results }, null, 2));
  console.log(`\nwritten to ${path.relative(process.cwd(), out)}`);
}
