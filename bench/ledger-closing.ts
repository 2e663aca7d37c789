// The ledger-closing scenario (`npm run bench -- --scenario ledger-closing`): a server starts
// over --closing-results imported results spread over --days days (none closed yet: the state
// after `ins import results`), and closes them at start while update_result is driven with
// autocannon. It reports update_result's rate while the history closes against its steady rate
// on the same server once closing is over [target: ≥ 80 %], and how long closing took. With
// --baseline DIR the same against another built checkout, in the same run (issue 30: closing at
// full speed left a third to a half of the steady rate). The history is written straight into
// PostgreSQL with generate_series (as bench/ledger.ts does), aggregates included; PostgreSQL only.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { hashKey } from '../src/keys.js';
import { adminQuery, databaseUrlOf, ENTRY, entryOf, ins, printRows, ROOT, startServer } from './common.js';

export interface ClosingBenchOptions {
  databaseUrl: string;
  results: number;
  days: number;
  nodes: number;
  models: number;
  connections: number;
  window: number;
  baseline: string | undefined;
  out: string | undefined;
}

const nodeKey = (i: number) => `nk_bench-closing-${String(i).padStart(6, '0')}-0123456789abcdefghijklmnop`;

/** The imported history, in a database of its own that each run copies (CREATE DATABASE … TEMPLATE). */
async function writeHistory(o: ClosingBenchOptions, url: string, entry: string): Promise<void> {
  await ins(['migrate'], { ...process.env, DATABASE_URL: url }, entry);
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query('SET statement_timeout = 0');
    await c.query(
      `INSERT INTO nodes (name, key_hash) SELECT 'bench-node-' || lpad(g::text, 6, '0'), h FROM unnest($1::text[]) WITH ORDINALITY AS k(h, g)`,
      [Array.from({ length: o.nodes }, (_, i) => hashKey(nodeKey(i + 1)))],
    );
    await c.query(`INSERT INTO models (name) SELECT 'bench-model-' || lpad(g::text, 2, '0') || ':latest' FROM generate_series(1, $1::int) g`, [
      o.models,
    ]);
    // Results evenly over the --days days that ended before yesterday (all due at start); 5 % errors.
    await c.query(
      `INSERT INTO job_results (job_id, node_id, model_id, status, result, points, received_at)
      SELECT 'hist-' || g, 1 + (g * 7919) % $2::int, 1 + (g * 31) % $3::int, CASE WHEN g % 20 = 0 THEN 'error' ELSE 'success' END, '{}',
        CASE WHEN g % 20 = 0 THEN 0 ELSE 1 END,
        date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - make_interval(days => $4::int + 2) + make_interval(secs => g * 86400.0 * $4::int / $1::int)
      FROM generate_series(0, $1::int - 1) g`,
      [o.results, o.nodes, o.models, o.days],
    );
    await c.query(`INSERT INTO node_daily_points (node_id, day, points, successes)
      SELECT node_id, (received_at AT TIME ZONE 'UTC')::date, sum(points), count(*) FROM job_results WHERE status = 'success' GROUP BY 1, 2`);
    await c.query(
      `INSERT INTO model_nodes SELECT model_id, node_id, min(received_at), max(received_at) FROM job_results WHERE status = 'success' GROUP BY 1, 2`,
    );
    await c.query(`INSERT INTO model_node_days SELECT model_id, node_id, (received_at AT TIME ZONE 'UTC')::date, min(received_at), max(received_at)
      FROM job_results WHERE status = 'success' GROUP BY 1, 2, 3`);
    await c.query('VACUUM ANALYZE');
  } finally {
    await c.end();
  }
}

interface Phase {
  seconds: number;
  requests: number;
  perSecond: number;
  errors: number;
}
interface ClosingRun {
  code: string;
  closingSeconds: number;
  closing: Phase;
  steady: Phase;
  kept: number;
}

async function runCode(o: ClosingBenchOptions, code: string, entry: string, template: string, port: number): Promise<ClosingRun> {
  const name = `ins_bench_closing_${code}_${process.pid}`;
  await adminQuery(o.databaseUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await adminQuery(o.databaseUrl, `CREATE DATABASE ${name} TEMPLATE ${template}`);
  const url = databaseUrlOf(o.databaseUrl, name);
  const state = new pg.Client({ connectionString: url });
  let n = 0;
  const load = async (seconds: number) => {
    const r = await autocannon({
      url: `http://127.0.0.1:${port}`,
      connections: o.connections,
      duration: seconds,
      requests: [
        {
          method: 'POST',
          path: '/worker/update_result',
          headers: { 'content-type': 'application/json' },
          setupRequest: ((req: Record<string, unknown>) => ({
            ...req,
            body: JSON.stringify({
              job_id: `live-${code}-${n++}`,
              api_key: nodeKey(1 + (n % o.nodes)),
              model_name: 'bench-model-01:latest',
              result: { message: 'benchmark output' },
              status: 'success',
            }),
          })) as never,
        },
      ],
    });
    return { requests: r.requests.total, errors: r.errors + r.timeouts + r.non2xx, seconds: r.duration };
  };
  const phase = (parts: { requests: number; errors: number; seconds: number }[]): Phase => {
    const seconds = parts.reduce((s, p) => s + p.seconds, 0);
    const requests = parts.reduce((s, p) => s + p.requests, 0);
    return {
      seconds: Math.round(seconds * 10) / 10,
      requests,
      perSecond: Math.round(requests / Math.max(seconds, 0.001)),
      errors: parts.reduce((s, p) => s + p.errors, 0),
    };
  };
  const server = await startServer(
    { ...process.env, DATABASE_URL: url },
    port,
    path.join(ROOT, 'bench-results', `server-closing-${code}.log`),
    {},
    entry,
  );
  try {
    await state.connect();
    const started = performance.now();
    // The last due day: the day before yesterday (the default evidence window is a day).
    const closed = async () =>
      (
        await state.query<{ done: boolean }>(
          `SELECT coalesce(closed_through >= (now() AT TIME ZONE 'UTC')::date - 2, false) AS done FROM ledger_state`,
        )
      ).rows[0]?.done ?? false;
    const during: Awaited<ReturnType<typeof load>>[] = [];
    while (!(await closed())) during.push(await load(o.window));
    const closingSeconds = (performance.now() - started) / 1000;
    // A window that outlived the closing counts as closing: the rate is a lower bound of what live traffic kept.
    const steady: Awaited<ReturnType<typeof load>>[] = [];
    for (let s = 0; s < Math.max(during.length, 3); s++) steady.push(await load(o.window));
    const c = phase(during);
    const st = phase(steady);
    return {
      code,
      closingSeconds: Math.round(closingSeconds * 10) / 10,
      closing: c,
      steady: st,
      kept: Math.round((c.perSecond / Math.max(1, st.perSecond)) * 1000) / 10,
    };
  } finally {
    await state.end().catch(() => {});
    await server.stop();
    await adminQuery(o.databaseUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
}

export async function ledgerClosingScenario(o: ClosingBenchOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  const load = () =>
    loadavg()
      .map((l) => l.toFixed(1))
      .join(' ');
  console.log(
    `\n== ledger-closing: ${o.results.toLocaleString('en')} results over ${o.days} days, ${o.nodes} nodes; update_result with ${o.connections} connections in ${o.window} s windows; load average ${load()}`,
  );
  const template = `ins_bench_closing_history_${process.pid}`;
  const codes: [string, string][] = [['current', ENTRY], ...(o.baseline ? [['baseline', entryOf(o.baseline)] as [string, string]] : [])];
  await adminQuery(o.databaseUrl, `DROP DATABASE IF EXISTS ${template} WITH (FORCE)`);
  await adminQuery(o.databaseUrl, `CREATE DATABASE ${template}`);
  const runs: ClosingRun[] = [];
  try {
    // The history with the oldest code's schema: each server migrates its copy at start.
    const t0 = performance.now();
    await writeHistory(o, databaseUrlOf(o.databaseUrl, template), codes[codes.length - 1]![1]);
    console.log(`history written in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
    let port = 19_500 + (process.pid % 200);
    for (const [code, entry] of codes) {
      runs.push(await runCode(o, code, entry, template, port++));
      console.log(` ${code}: done (load average ${load()})`);
    }
  } finally {
    await adminQuery(o.databaseUrl, `DROP DATABASE IF EXISTS ${template} WITH (FORCE)`);
  }
  console.log(`\nledger-closing: ${cpus().length} cores, Node ${process.version}, load average at end ${load()}`);
  printRows([
    ['code', 'closing took', 'update_result/s while closing', 'steady', 'kept [≥ 80 %]', 'errors'],
    ...runs.map((r) => [
      r.code,
      `${r.closingSeconds} s`,
      String(r.closing.perSecond),
      String(r.steady.perSecond),
      `${r.kept} % [${r.kept >= 80 ? 'met' : 'MISSED'}]`,
      String(r.closing.errors + r.steady.errors),
    ]),
  ]);
  const out = o.out ?? path.join(ROOT, 'bench-results', `ledger-closing-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(out, JSON.stringify({ options: o, cores: cpus().length, node: process.version, runs }, null, 2));
  console.log(`\nwritten to ${path.relative(process.cwd(), out)}`);
}
