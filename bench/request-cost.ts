// The server's CPU per request of the job cycle's commonest requests, apart from throughput
// (`npm run bench -- --scenario request-cost --baseline DIR`): on a busy shared machine jobs/s
// swing several-fold between identical runs, while the CPU a request costs the server moves
// far less. One node declares the model and never takes a job; one job is submitted and stays
// queued. Then, for each kind, `--requests` requests over 16 connections, and the server's CPU
// (utime + stime from /proc) over them, per request in µs:
// - pending poll: GET /get_result/{id} of the queued job (404, answered from memory) — the poll
//   mode's commonest request, 4-5 per job;
// - empty get_job: GET /worker/get_job without wait ({"job_data": null});
// - submit: POST /submit_job (a job each; they stay queued).
// With --baseline, that checkout's server and this one alternate (baseline, current, current,
// baseline, …) `--runs` times each, on fresh databases; the table shows each's median.
// `--current DIR` puts another built checkout in this one's place (two older commits compared).
// After each run, the floor: the same pending polls against bench/floor-server.ts (Fastify, our
// logger and access line, a route answering from a Map, nothing else) — what any request costs
// here, measured beside each run since the machine's speed drifts between runs.
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { ENTRY, entryOf, freshDatabase, importBenchNodes, ins, printRows, ROOT, startServer } from './common.js';
import { http, MODEL } from './cycle.js';

export interface RequestCostOptions {
  databaseUrl: string;
  baseline: string | undefined;
  requests: number;
  runs: number;
  out: string | undefined;
  current: string | undefined;
}

const TICKS = 100; // USER_HZ on Linux
const CONNECTIONS = 16;

function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS;
}

type Kind = 'pending poll' | 'empty get_job' | 'submit';
const KINDS: Kind[] = ['pending poll', 'empty get_job', 'submit'];

async function oneRun(code: 'baseline' | 'current', entry: string, o: RequestCostOptions, port: number): Promise<Record<Kind, number>> {
  const db = await freshDatabase('postgres', o.databaseUrl, `ins_bench_request_cost_${process.pid}`);
  try {
    const [node] = await importBenchNodes(db.env, 'cost-worker', 1, entry);
    const userKey = (await ins(['key', 'add-user', 'bench'], db.env, entry)).trim();
    const server = await startServer(db.env, port, path.join(ROOT, 'bench-results', `server-request-cost-${code}.log`), { VERIFY: 'off' }, entry);
    const h = http(server.url, CONNECTIONS);
    try {
      const reg = await h.json<{ access_token: string }>(
        'POST',
        '/worker/register_node',
        { authorization: `Bearer ${node!.key}` },
        { node_url: node!.name, node_version: 'bench', stats: {} },
      );
      const auth = { authorization: `Bearer ${reg.body.access_token}` };
      await h.json('POST', '/worker/update_models', auth, { node_url: node!.name, models: [MODEL] });
      const submit = () =>
        h.json<{ job_id: string }>(
          'POST',
          '/submit_job',
          { api_key: userKey },
          { model: MODEL, messages: [{ role: 'user', content: 'a question that waits' }], max_output: 64, temperature: 0 },
        );
      const jobId = (await submit()).body.job_id;
      const request: Record<Kind, () => Promise<{ status: number }>> = {
        'pending poll': () => h.json('GET', `/get_result/${jobId}`, { api_key: userKey }),
        'empty get_job': () => h.json('GET', '/worker/get_job?node_version=bench', auth),
        submit,
      };
      const expected: Record<Kind, number> = { 'pending poll': 404, 'empty get_job': 200, submit: 200 };
      const out = {} as Record<Kind, number>;
      for (const kind of KINDS) out[kind] = await perRequest(server.child.pid!, o.requests, request[kind], expected[kind], kind);
      console.log(`   ${code}: ${JSON.stringify(out)} µs of server CPU per request`);
      return out;
    } finally {
      await h.pool.close();
      await server.stop();
    }
  } finally {
    await db.cleanup();
  }
}

/** The server's CPU per request, µs: a warm-up of a tenth, then `requests` over the connections. */
async function perRequest(
  pid: number,
  requests: number,
  request: () => Promise<{ status: number }>,
  expected: number,
  kind: string,
): Promise<number> {
  let cost = NaN;
  for (const n of [Math.ceil(requests / 10), requests]) {
    let next = 0;
    const before = cpuSeconds(pid);
    await Promise.all(
      Array.from({ length: CONNECTIONS }, async () => {
        while (next++ < n) {
          const r = await request();
          if (r.status !== expected) throw new Error(`${kind}: ${r.status}`);
        }
      }),
    );
    cost = Math.round((((cpuSeconds(pid) - before) * 1e6) / n) * 10) / 10;
  }
  return cost;
}

/** The pending poll against bench/floor-server.ts. */
async function floor(o: RequestCostOptions, port: number): Promise<number> {
  const server = await startServer({}, port, path.join(ROOT, 'bench-results', 'server-request-cost-floor.log'), {}, [
    '--import',
    'tsx',
    path.join(ROOT, 'bench', 'floor-server.ts'),
  ]);
  const h = http(server.url, CONNECTIONS);
  try {
    return await perRequest(server.child.pid!, o.requests, () => h.json('GET', '/get_result/a-job', { api_key: 'unused' }), 404, 'floor');
  } finally {
    await h.pool.close();
    await server.stop();
  }
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

export async function requestCostScenario(o: RequestCostOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  const port = 19_500 + (process.pid % 400);
  const order: ['baseline' | 'current', string][] = [];
  for (let i = 0; i < o.runs; i++) {
    const current = o.current ? entryOf(o.current) : ENTRY;
    const pair: ['baseline' | 'current', string][] = o.baseline
      ? [
          ['baseline', entryOf(o.baseline)],
          ['current', current],
        ]
      : [['current', current]];
    order.push(...(i % 2 ? pair.reverse() : pair));
  }
  const runs: { code: string; cost: Record<Kind, number> }[] = [];
  const floors: number[] = [];
  for (const [code, entry] of order) {
    runs.push({ code, cost: await oneRun(code, entry, o, port) });
    floors.push(await floor(o, port));
    console.log(`   floor (bench/floor-server.ts): ${floors.at(-1)} µs of server CPU per pending poll`);
  }
  const floorCost = median(floors);
  const codes = o.baseline ? ['baseline', 'current'] : ['current'];
  console.log(
    `\nserver CPU per request, µs (median of ${o.runs} runs each${o.baseline ? ', alternating' : ''}; ${o.requests} requests a kind, ${CONNECTIONS} connections):`,
  );
  printRows([
    ['request', ...codes, ...(o.baseline ? ['current / baseline'] : [])],
    ...KINDS.map((kind) => {
      const m = codes.map((c) => median(runs.filter((r) => r.code === c).map((r) => r.cost[kind])));
      return [kind, ...m.map(String), ...(o.baseline ? [(m[1]! / m[0]!).toFixed(2)] : [])];
    }),
    [
      'pending poll, floor (Fastify, our logger, nothing else: bench/floor-server.ts, median of every run)',
      ...codes.map(() => String(floorCost)),
      ...(o.baseline ? [''] : []),
    ],
  ]);
  const out = o.out ?? path.join(ROOT, 'bench-results', `request-cost-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(out, JSON.stringify({ options: o, runs, floors }, null, 2));
  console.log(`\nwritten to ${path.relative(process.cwd(), out)}`);
}
