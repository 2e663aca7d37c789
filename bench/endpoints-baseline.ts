// `npm run bench -- --scenario endpoints --baseline DIR [--rounds N]`: the seed's record endpoints
// of this checkout against a built checkout's (DIR), with one harness and both servers up at
// once, each over its own PostgreSQL database holding the same imported history (imported by its
// own `ins`, as its schema is its own). Each endpoint is driven in rounds, the two servers in
// alternating order (A B, B A, …), so neither has the warmer machine; per endpoint, each
// round's ratio and their median. Before this, each checkout ran its own endpoints scenario in
// turn, and the two harnesses' request mixes and the time between their runs could differ.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { ensureHistory } from './history.js';
import { ENTRY, entryOf, freshDatabase, ins, postgresCpuSeconds, printRows, ROOT, startServer, type Server } from './common.js';
import { load, scenarios, type EndpointsOptions } from './endpoints.js';

const STMT_COUNT = 'ins_db_statement_duration_seconds_count';
const STMT_SUM = 'ins_db_statement_duration_seconds_sum';

/** A server's /metrics as series name (with labels) → value. */
async function metricsOf(url: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = new Map<string, number>();
  for (const l of text.split('\n')) {
    if (l.startsWith('#') || !l) continue;
    const at = l.lastIndexOf(' ');
    out.set(l.slice(0, at), Number(l.slice(at + 1)));
  }
  return out;
}
const series = (m: Map<string, number>, name: string): number => m.get(name) ?? 0;

/** Catch-up statements: closing a day's ledger, pruning by retention. */
const catchUp = (m: Map<string, number>): number =>
  [...m]
    .filter(([k]) => k.startsWith(STMT_COUNT) && /"(ledger_insert_day|ledger_move_pending|retention_prune_\w+)"/.test(k))
    .reduce((a, [, v]) => a + v, 0);

/** Seconds until the server ran no catch-up statement for 10 s (at most 15 minutes). */
async function caughtUp(url: string): Promise<number> {
  const start = Date.now();
  let last = catchUp(await metricsOf(url));
  let changed = Date.now();
  while (Date.now() - changed < 10_000) {
    if (Date.now() - start > 15 * 60_000) throw new Error(`${url} still catching up after 15 minutes`);
    await new Promise((r) => setTimeout(r, 2000));
    const now = catchUp(await metricsOf(url));
    if (now !== last) [last, changed] = [now, Date.now()];
  }
  return Math.round((changed - start) / 1000);
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export async function endpointsAgainst(o: EndpointsOptions, baseline: string, rounds: number, only?: string): Promise<void> {
  const { history: opts, duration, warmup, connections } = o;
  const files = await ensureHistory(path.resolve(ROOT, o.dataDir), opts, Math.floor(Date.now() / 3_600_000) * 3_600_000);
  const checkouts = [
    { code: 'baseline', entry: entryOf(baseline) },
    { code: 'current', entry: ENTRY },
  ];
  const port = 18_000 + (process.pid % 1000);
  const dbs = [];
  const servers: Server[] = [];
  try {
    for (const [i, c] of checkouts.entries()) {
      const db = await freshDatabase('postgres', o.databaseUrl, `ins_bench_vs_${c.code}_${process.pid}`);
      dbs.push(db);
      console.log(`== ${c.code}: importing ${opts.nodes} nodes and ${opts.results.toLocaleString('en')} results`);
      await ins(['migrate'], db.env, c.entry);
      await ins(['import', 'nodes', files.nodesFile], db.env, c.entry);
      await ins(['import', 'results', files.resultsFile], db.env, c.entry);
      servers.push(await startServer(db.env, port + i, path.join(ROOT, 'bench-results', `server-vs-${c.code}.log`), {}, c.entry));
    }
    // Steady state: a server started over an imported history first closes its days and prunes
    // what retention drops, in paced slices (src/ledger/pace.ts); 71457a1 and this code do this
    // catch-up differently, and measured during it each measured the other's catch-up as much as
    // its endpoints (issue 56: daily_points 0.62–0.78× in rounds that overlapped this checkout's
    // ledger closing, 1.00 and 0.95 after it).
    for (const [i, s] of servers.entries()) console.log(`   ${checkouts[i]!.code}: caught up after ${await caughtUp(s.url)} s`);
    const seen = await Promise.all(servers.map((s) => metricsOf(s.url)));
    const pgCpu = await postgresCpuSeconds(o.databaseUrl);
    const table = [['endpoint', 'round', 'baseline req/s (p99 ms)', 'current req/s (p99 ms)', 'current / baseline']];
    const summary: { endpoint: string; ratios: number[]; median: number; cost: { requests: number; server: number; postgres: number }[] }[] = [];
    for (const [endpoint, method, setup] of scenarios(opts, `bench-vs-${Date.now()}`)) {
      if (endpoint.startsWith('unique_nodes') || (only && !only.split(',').some((x) => endpoint.includes(x)))) continue;
      const ratios: number[] = [];
      // Each server's CPU and PostgreSQL's (its processes: the one database server both use, so
      // read around each load alone) over this endpoint's rounds, per request.
      const cost = checkouts.map(() => ({ requests: 0, server: 0, postgres: 0 }));
      for (let round = 0; round < rounds; round++) {
        const rps = [0, 0];
        const p99 = [0, 0];
        for (const i of round % 2 === 0 ? [0, 1] : [1, 0]) {
          if (warmup > 0) await load(servers[i]!.url, setup, method, warmup, connections);
          const [cpuBefore, pgBefore] = [series(await metricsOf(servers[i]!.url), 'process_cpu_seconds_total'), pgCpu?.()];
          const r = await load(servers[i]!.url, setup, method, duration, connections);
          const [cpuAfter, pgAfter] = [series(await metricsOf(servers[i]!.url), 'process_cpu_seconds_total'), pgCpu?.()];
          cost[i]!.requests += r.requests.total;
          cost[i]!.server += cpuAfter - cpuBefore;
          cost[i]!.postgres += pgAfter !== undefined && pgBefore !== undefined ? pgAfter - pgBefore : NaN;
          if (r.errors + r.timeouts + r.non2xx > 0) throw new Error(`${checkouts[i]!.code} ${endpoint}: ${r.errors + r.timeouts + r.non2xx} errors`);
          rps[i] = Math.round(r.requests.average);
          p99[i] = r.latency.p99;
        }
        const ratio = Math.round((rps[1]! / rps[0]!) * 100) / 100;
        ratios.push(ratio);
        table.push([endpoint, String(round + 1), `${rps[0]} (${p99[0]})`, `${rps[1]} (${p99[1]})`, ratio.toFixed(2)]);
        console.log(`   ${endpoint} round ${round + 1}: ${rps[0]} → ${rps[1]} (${ratio})`);
      }
      const us = (seconds: number, requests: number) => (Number.isNaN(seconds) ? 'n/a' : String(Math.round((seconds * 1e6) / Math.max(1, requests))));
      console.log(
        `   ${endpoint}, CPU per request (µs), server / PostgreSQL: ${checkouts.map((c, i) => `${c.code} ${us(cost[i]!.server, cost[i]!.requests)} / ${us(cost[i]!.postgres, cost[i]!.requests)}`).join(', ')}`,
      );
      summary.push({ endpoint, ratios, median: median(ratios), cost });
      // Where each server's time went over these rounds: key lookups by source, and the
      // statements' count and mean time (the servers' own metrics, before against after).
      for (const [i, s] of servers.entries()) {
        const now = await metricsOf(s.url);
        const d = (name: string) => Math.round(series(now, name) - series(seen[i]!, name));
        const stmts = [...new Set([...now.keys()].filter((k) => k.startsWith(STMT_COUNT)).map((k) => k.slice(STMT_COUNT.length)))]
          .map((l) => ({ l, n: d(STMT_COUNT + l), ms: (series(now, STMT_SUM + l) - series(seen[i]!, STMT_SUM + l)) * 1000 }))
          .filter((x) => x.n > 0)
          .map((x) => `${x.l.replace(/^\{statement="|"\}$/g, '')} ${x.n} × ${(x.ms / x.n).toFixed(2)} ms`);
        console.log(
          `   ${checkouts[i]!.code}: key lookups cache ${d('ins_key_lookups_total{source="cache"}')}, database ${d('ins_key_lookups_total{source="database"}')}; ${stmts.join('; ')}`,
        );
        seen[i] = now;
      }
      table.push([endpoint, 'median', '', '', median(ratios).toFixed(2)]);
    }
    console.log(`\nthis checkout against ${baseline}, ${connections} connections, ${duration} s a round after ${warmup} s of warm-up`);
    printRows(table);
    const out = o.out ?? path.join(ROOT, 'bench-results', `endpoints-vs-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
    writeFileSync(out, JSON.stringify({ baseline, options: opts, duration, warmup, connections, summary }, null, 2));
  } finally {
    for (const s of servers) await s.stop();
    for (const db of dbs) await db.cleanup();
  }
}
