// The added-latency scenario (`npm run bench -- --scenario added-latency`): what the network adds
// to one request, measured as LLM gateways are compared — sequential requests on localhost, in
// interleaved rounds of 25 (straight to the backend, then through the network), the median of
// the rounds' medians, after a warm-up round. The backend is an OpenAI-compatible server
// (test/helpers/backends.ts, the vLLM kind) that answers at once, and streams its four words
// 20 ms apart; the network is the built server and one `ins worker --backend openai` process
// in front of the same backend (`/v1/chat/completions` → a job → the worker → the backend).
// Measured, per database: a non-streamed answer's latency; a streamed answer's time to its
// first token (p50, p99), and the gaps between its tokens as the application sees them; and for
// the non-streamed requests, each statement's time per request (where the database's part goes).
// On PostgreSQL also across two servers: the application on one, the worker on the other, so the
// answer and the streamed text reach the application's server by notification.
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Pool } from 'undici';
import { type Backend, ENTRY, freshDatabase, ins, parseBackends, percentile, printRows, ROOT, startServer } from './common.js';
import { startFakeBackend } from '../test/helpers/backends.js';

export interface AddedLatencyOptions {
  backends: string;
  databaseUrl: string;
  rounds: number;
  out: string | undefined;
}

const MODEL = 'bench-latency';
const WORDS = 'one two three four';
const GAP_MS = 20;
const ROUND = 25;

/** Per label value of `label`, a summary's or histogram's sum and count (`name`_sum, `name`_count) in a /metrics text. */
function byLabel(text: string, name: string, label: string): Map<string, { sum: number; count: number }> {
  const out = new Map<string, { sum: number; count: number }>();
  for (const line of text.split('\n')) {
    const m = new RegExp(`^${name}_(sum|count)\\{.*${label}="([^"]*)"`).exec(line);
    if (!m) continue;
    const e = out.get(m[2]!) ?? { sum: 0, count: 0 };
    e[m[1] as 'sum' | 'count'] += Number(line.slice(line.lastIndexOf(' ') + 1));
    out.set(m[2]!, e);
  }
  return out;
}

/**
 * Where a non-streamed request's time goes on the server, per request through the network: each
 * statement's time (its commit included: ins_db_statement_duration_seconds) and count, between two
 * /metrics texts. What is not in a statement is HTTP, the worker and the backend.
 */
function statementsPerRequest(before: string, after: string, requests: number): string[][] {
  const [a, b] = [
    byLabel(before, 'ins_db_statement_duration_seconds', 'statement'),
    byLabel(after, 'ins_db_statement_duration_seconds', 'statement'),
  ];
  const rows: string[][] = [];
  for (const [statement, end] of b) {
    const start = a.get(statement) ?? { sum: 0, count: 0 };
    const count = (end.count - start.count) / requests;
    if (count < 0.01) continue;
    rows.push([statement, count.toFixed(2), `${(((end.sum - start.sum) * 1000) / requests).toFixed(2)} ms`]);
  }
  return rows.sort((x, y) => Number.parseFloat(y[2]!) - Number.parseFloat(x[2]!));
}

const median = (xs: number[]) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );

/** One chat completion through `pool` at `path`; its total time, and when streamed its first token's and the gaps after it. */
async function once(pool: Pool, pathName: string, auth: string, stream: boolean): Promise<{ total: number; first: number; gaps: number[] }> {
  const t0 = performance.now();
  const res = await pool.request({
    method: 'POST',
    path: pathName,
    headers: { authorization: `Bearer ${auth}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream, temperature: 0 }),
  });
  if (res.statusCode !== 200) throw new Error(`${pathName}: ${res.statusCode} ${await res.body.text()}`);
  if (!stream) {
    await res.body.json();
    return { total: performance.now() - t0, first: NaN, gaps: [] };
  }
  let first = NaN;
  let last = NaN;
  const gaps: number[] = [];
  let buffer = '';
  for await (const chunk of res.body) {
    buffer += String(chunk);
    let at: number;
    while ((at = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      // A content token (not the role chunk, whose content is empty).
      if (!/"content":"[^"]/.test(event)) continue;
      const now = performance.now();
      if (Number.isNaN(first)) first = now - t0;
      else gaps.push(now - last);
      last = now;
    }
  }
  return { total: performance.now() - t0, first, gaps };
}

export async function addedLatencyScenario(o: AddedLatencyOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  const rows = [['database', 'measure', 'straight to the backend', 'through the network', 'added']];
  const breakdown = [['database', 'statement (non-streamed requests)', 'runs per request', 'time per request, commit included']];
  const fake = await startFakeBackend('vllm', [MODEL]);
  fake.answer = () => WORDS;
  const direct = new Pool(fake.url, { connections: 2 });
  try {
    // PostgreSQL twice: one server, then two over the same database, the application on the
    // first and the worker on the second (its text reaches the first by NOTIFY ins_progress).
    const setups: [Backend, 1 | 2][] = parseBackends(o.backends).flatMap((b): [Backend, 1 | 2][] =>
      b === 'postgres'
        ? [
            [b, 1],
            [b, 2],
          ]
        : [[b, 1]],
    );
    for (const [backend, servers] of setups) {
      const label = servers === 1 ? backend : `${backend}, 2 servers`;
      const db = await freshDatabase(backend, o.databaseUrl, `ins_bench_latency_${process.pid}`);
      const key = `nk_${randomBytes(32).toString('base64url')}`;
      const file = path.join(ROOT, 'bench-results', `latency-nodes-${process.pid}.csv`);
      writeFileSync(file, `name,api_key\nbench-latency,${key}\n`);
      await ins(['migrate'], db.env);
      await ins(['import', 'nodes', file], db.env);
      const userKey = (await ins(['key', 'add-user', 'bench'], db.env)).trim();
      const server = await startServer(db.env, 19_400 + (process.pid % 90), path.join(ROOT, 'bench-results', `server-latency-${backend}.log`));
      const workers =
        servers === 1
          ? server
          : await startServer(db.env, 19_490 + (process.pid % 90), path.join(ROOT, 'bench-results', `server-latency-${backend}-2.log`));
      const worker = spawn(
        process.execPath,
        [ENTRY, 'worker', '--server', workers.url, '--node', 'bench-latency', '--key', key, '--backend', 'openai', '--backend-url', fake.url],
        { stdio: 'ignore', env: { ...process.env, LOG_LEVEL: 'warn' } },
      );
      const network = new Pool(server.url, { connections: 2 });
      try {
        for (let i = 0; ; i++) {
          const models = (await (await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${userKey}` } })).json()) as {
            data?: { id: string }[];
          };
          if (models.data?.some((m) => m.id === MODEL)) break;
          if (i > 600) throw new Error('the worker did not declare its model');
          await new Promise((r) => setTimeout(r, 100));
        }
        for (const stream of [false, true]) {
          fake.delayMs = stream ? GAP_MS * WORDS.split(' ').length : 0;
          const medians = { direct: [] as number[], network: [] as number[] };
          const all = { direct: [] as number[], network: [] as number[] };
          const gaps: number[] = [];
          let metricsBefore = '';
          // A warm-up round, then the measured ones, each side in turn.
          for (let round = 0; round <= o.rounds; round++) {
            for (const side of ['direct', 'network'] as const) {
              const times: number[] = [];
              for (let i = 0; i < ROUND; i++) {
                const r =
                  side === 'direct'
                    ? await once(direct, '/v1/chat/completions', 'none', stream)
                    : await once(network, '/v1/chat/completions', userKey, stream);
                times.push(stream ? r.first : r.total);
                if (side === 'network' && round > 0) gaps.push(...r.gaps);
              }
              if (round === 0) {
                if (side === 'network') metricsBefore = await (await fetch(`${server.url}/metrics`)).text();
                continue;
              }
              medians[side].push(median(times));
              all[side].push(...times);
            }
          }
          const p99 = (xs: number[]) =>
            percentile(
              [...xs].sort((a, b) => a - b),
              99,
            );
          const [d, n] = [median(medians.direct), median(medians.network)];
          const what = stream ? 'time to first token, p50' : 'non-streamed answer, p50';
          rows.push([label, what, `${d.toFixed(2)} ms`, `${n.toFixed(2)} ms`, `+${(n - d).toFixed(2)} ms`]);
          if (!stream) {
            const metricsAfter = await (await fetch(`${server.url}/metrics`)).text();
            for (const row of statementsPerRequest(metricsBefore, metricsAfter, o.rounds * ROUND)) breakdown.push([label, ...row]);
          }
          if (stream) {
            rows.push([
              label,
              'time to first token, p99',
              `${p99(all.direct).toFixed(2)} ms`,
              `${p99(all.network).toFixed(2)} ms`,
              `+${(p99(all.network) - p99(all.direct)).toFixed(2)} ms`,
            ]);
            rows.push([
              label,
              `gap between tokens (backend: ${GAP_MS} ms), p50 / p90`,
              `${GAP_MS} ms`,
              `${median(gaps).toFixed(2)} / ${percentile(
                [...gaps].sort((a, b) => a - b),
                90,
              ).toFixed(2)} ms`,
              '',
            ]);
          }
        }
      } finally {
        await network.close();
        worker.kill('SIGTERM');
        if (workers !== server) await workers.stop();
        await server.stop();
        await db.cleanup();
      }
    }
  } finally {
    await direct.close();
    await fake.close();
  }
  printRows(rows);
  console.log("\nthe database's part of a non-streamed request through the network (ins_db_statement_duration_seconds):");
  printRows(breakdown);
  if (o.out) writeFileSync(o.out, JSON.stringify({ rows, breakdown }));
}
