// The fair scenario (`npm run bench -- --scenario fair`): fair queueing between applications
// (issue 23), over HTTP against the built server on PostgreSQL (VERIFY=off, rate limits off).
// W workers (16) long-poll get_job and take --service-ms per job (a node's generation time);
// a heavy user keeps about --backlog (5,000) jobs queued; a light user submits one job a second.
// Phases of warmup + duration each, on one server: the light user alone, then the heavy user
// alone and both, twice (alternating; the means are reported). Measured: the light user's submit→lease (the worker's get_job answer) p50/p99
// alone and beside the heavy backlog [target: within 2×] (and how much of it is the submit_job
// call itself), the heavy user's jobs/s alone and
// beside the light user [target: within 10 %]. With --baseline DIR the same runs against
// another built checkout (before fair queueing: first come, first served).
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import path from 'node:path';
import { ENTRY, entryOf, freshDatabase, ins, percentile, printRows, ROOT, startServer, importBenchNodes } from './common.js';
import { http, type Http } from './cycle.js';

export interface FairOptions {
  databaseUrl: string;
  warmup: number;
  duration: number;
  out: string | undefined;
  baseline: string | undefined;
  workers: number;
  backlog: number;
  serviceMs: number;
  lightPerSecond: number;
}

const MODEL = 'bench-fair:latest';
const now = (): number => performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Phase {
  lightLease: { p50: number; p99: number; n: number };
  lightSubmit: { p50: number; p99: number };
  heavyPerSecond: number;
}
interface FairRun {
  code: 'current' | 'baseline';
  light: Phase;
  heavy: Phase;
  both: Phase;
}

async function runCode(o: FairOptions, code: 'current' | 'baseline', entry: string, port: number): Promise<FairRun> {
  const db = await freshDatabase('postgres', o.databaseUrl, `ins_bench_fair_${process.pid}`);
  try {
    await ins(['migrate'], db.env, entry);
    const nodes = await importBenchNodes(db.env, 'fair-worker', o.workers, entry);
    const heavyKey = (await ins(['key', 'add-user', 'heavy'], db.env, entry)).trim();
    const lightKey = (await ins(['key', 'add-user', 'light'], db.env, entry)).trim();
    const server = await startServer(db.env, port, path.join(ROOT, 'bench-results', `server-fair-${code}.log`), { VERIFY: 'off' }, entry);
    const h = http(server.url, o.workers + 64);
    try {
      const run = { code, ...(await phases(h, o, nodes, heavyKey, lightKey)) };
      console.log(
        `   statements (mean over the run, from /metrics): ${await statementMeans(server.url, ['jobs_submit', 'jobs_lease', 'jobs_complete'])}`,
      );
      return run;
    } finally {
      await h.pool.close();
      await server.stop();
    }
  } finally {
    await db.cleanup();
  }
}

/** Each statement's count and mean duration, from the server's metrics. */
async function statementMeans(url: string, names: string[]): Promise<string> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return names
    .map((name) => {
      const value = (what: string) =>
        Number(new RegExp(`^ins_db_statement_duration_seconds_${what}\\{statement="${name}"\\} ([\\d.e+-]+)$`, 'm').exec(text)?.[1] ?? NaN);
      return `${name} ${value('count')} × ${((value('sum') / value('count')) * 1000).toFixed(2)} ms`;
    })
    .join(', ');
}

async function phases(
  h: Http,
  o: FairOptions,
  nodes: { name: string; key: string }[],
  heavyKey: string,
  lightKey: string,
): Promise<{ light: Phase; heavy: Phase; both: Phase }> {
  const leasedAt = new Map<string, number>();
  /** Light jobs waiting for their lease (no polling: the worker that leases one says so). */
  const waitingLease = new Map<string, () => void>();
  let heavyDone = 0;
  let heavySubmitted = 0;
  let stop = false;
  const auths = await Promise.all(
    nodes.map(async (w) => {
      const reg = await h.json<{ access_token: string }>(
        'POST',
        '/worker/register_node',
        { authorization: `Bearer ${w.key}` },
        { node_url: w.name, node_version: 'bench', stats: {} },
      );
      if (reg.status !== 200) throw new Error(`register_node ${reg.status}`);
      const auth = { authorization: `Bearer ${reg.body.access_token}` };
      await h.json('POST', '/worker/update_models', auth, { node_url: w.name, models: [MODEL] });
      return auth;
    }),
  );
  const workerLoops = auths.map(async (auth) => {
    while (!stop) {
      const res = await h.json<{ job_data: { job_id: string; api_key: string; model: string; messages: { content: string }[] } | null }>(
        'GET',
        '/worker/get_job?node_version=bench&wait=2',
        auth,
      );
      const job = res.body.job_data;
      if (!job) continue;
      leasedAt.set(job.job_id, now());
      waitingLease.get(job.job_id)?.();
      if (o.serviceMs > 0) await sleep(o.serviceMs);
      const r = await h.json(
        'POST',
        '/worker/update_result',
        {},
        {
          job_id: job.job_id,
          api_key: job.api_key,
          model_name: job.model,
          result: { message: { role: 'assistant', content: 'ok' } },
          status: 'success',
        },
      );
      if (r.status === 200 && job.messages[0]?.content === 'heavy') heavyDone++;
    }
  });
  const submit = async (key: string) => {
    const r = await h.json<{ job_id: string }>(
      'POST',
      '/submit_job',
      { api_key: key },
      { model: MODEL, messages: [{ role: 'user', content: key === heavyKey ? 'heavy' : 'light' }], max_output: 16, temperature: 0 },
    );
    if (r.status !== 200) throw new Error(`submit_job ${r.status}`);
    return r.body.job_id;
  };

  // The heavy user keeps about `backlog` jobs queued (16 submitters topping it up).
  let heavyOn = false;
  const heavyLoops = Array.from({ length: 16 }, async () => {
    while (!stop) {
      if (!heavyOn || heavySubmitted - heavyDone >= o.backlog) {
        await sleep(5);
        continue;
      }
      heavySubmitted++;
      await submit(heavyKey).catch((err: unknown) => {
        heavySubmitted--;
        throw err;
      });
    }
  });
  const fillBacklog = async () => {
    heavyOn = true;
    while (heavySubmitted - heavyDone < o.backlog * 0.95) await sleep(50);
  };
  const drain = async () => {
    heavyOn = false;
    while (heavySubmitted > heavyDone) await sleep(50);
  };

  const phase = async (name: string, light: boolean, heavy: boolean): Promise<Phase> => {
    if (heavy) await fillBacklog();
    const lightLeases: number[] = [];
    const lightSubmits: number[] = [];
    const pendingLight: Promise<void>[] = [];
    const start = now();
    const windowStart = start + o.warmup * 1000;
    const end = windowStart + o.duration * 1000;
    let heavyAtWindow = heavyDone;
    let counted = false;
    let next = start;
    while (now() < end) {
      if (!counted && now() >= windowStart) {
        heavyAtWindow = heavyDone;
        counted = true;
      }
      if (light && now() >= next) {
        next += 1000 / o.lightPerSecond;
        const t0 = now();
        const inWindow = t0 >= windowStart;
        pendingLight.push(
          (async () => {
            const id = await submit(lightKey);
            if (inWindow) lightSubmits.push(now() - t0);
            if (!leasedAt.has(id)) await new Promise<void>((r) => waitingLease.set(id, r));
            waitingLease.delete(id);
            if (inWindow) lightLeases.push(leasedAt.get(id)! - t0);
          })(),
        );
      }
      await sleep(2);
    }
    const heavyPerSecond = Math.round((heavyDone - heavyAtWindow) / o.duration);
    await Promise.all(pendingLight);
    lightLeases.sort((a, b) => a - b);
    lightSubmits.sort((a, b) => a - b);
    const round = (x: number) => Math.round(x * 10) / 10;
    const r = {
      lightLease: { p50: round(percentile(lightLeases, 50)), p99: round(percentile(lightLeases, 99)), n: lightLeases.length },
      lightSubmit: { p50: round(percentile(lightSubmits, 50)), p99: round(percentile(lightSubmits, 99)) },
      heavyPerSecond,
    };
    console.log(`   ${name}: ${JSON.stringify(r)}`);
    await drain();
    return r;
  };

  try {
    // Heavy alone and both twice, alternating, so that neither has the quieter machine.
    const light = await phase('light user alone', true, false);
    const heavy1 = await phase(`heavy user alone (${o.backlog} queued)`, false, true);
    const both1 = await phase('both', true, true);
    const both2 = await phase('both, again', true, true);
    const heavy2 = await phase('heavy user alone, again', false, true);
    const mean = (a: number, b: number) => Math.round(((a + b) / 2) * 10) / 10;
    const merge = (a: Phase, b: Phase): Phase => ({
      lightLease: {
        p50: mean(a.lightLease.p50, b.lightLease.p50),
        p99: mean(a.lightLease.p99, b.lightLease.p99),
        n: a.lightLease.n + b.lightLease.n,
      },
      lightSubmit: { p50: mean(a.lightSubmit.p50, b.lightSubmit.p50), p99: mean(a.lightSubmit.p99, b.lightSubmit.p99) },
      heavyPerSecond: Math.round(mean(a.heavyPerSecond, b.heavyPerSecond)),
    });
    return { light, heavy: merge(heavy1, heavy2), both: merge(both1, both2) };
  } finally {
    stop = true;
    await Promise.all([...workerLoops, ...heavyLoops]);
  }
}

export async function fairScenario(o: FairOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  let port = 19_000 + (process.pid % 500);
  const runs: FairRun[] = [];
  console.log(
    `\n== fair: ${o.workers} workers (${o.serviceMs} ms a job), a heavy user with ${o.backlog} queued, a light user at ${o.lightPerSecond}/s; ${o.warmup} + ${o.duration} s a phase, PostgreSQL`,
  );
  for (const [code, entry] of [['current', ENTRY], ...(o.baseline ? [['baseline', entryOf(o.baseline)]] : [])] as [
    'current' | 'baseline',
    string,
  ][]) {
    console.log(` ${code}:`);
    runs.push(await runCode(o, code, entry, port++));
  }
  console.log(`\nfair: ${cpus().length} cores, Node ${process.version}`);
  printRows([
    [
      'code',
      'light submit→lease p50/p99 ms, alone',
      'beside the backlog',
      'ratio [≤2]',
      'of it the submit_job call, p50 alone / beside',
      'heavy jobs/s alone',
      'beside the light user',
      'kept [≥90 %]',
    ],
    ...runs.map((r) => {
      const ratio = Math.round((r.both.lightLease.p50 / Math.max(0.1, r.light.lightLease.p50)) * 10) / 10;
      const kept = Math.round((r.both.heavyPerSecond / Math.max(1, r.heavy.heavyPerSecond)) * 1000) / 10;
      return [
        r.code,
        `${r.light.lightLease.p50} / ${r.light.lightLease.p99}`,
        `${r.both.lightLease.p50} / ${r.both.lightLease.p99}`,
        `${ratio} [${ratio <= 2 ? 'met' : 'MISSED'}]`,
        `${r.light.lightSubmit.p50} / ${r.both.lightSubmit.p50}`,
        String(r.heavy.heavyPerSecond),
        String(r.both.heavyPerSecond),
        `${kept} % [${kept >= 90 ? 'met' : 'MISSED'}]`,
      ];
    }),
  ]);
  const out = o.out ?? path.join(ROOT, 'bench-results', `fair-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(out, JSON.stringify({ options: o, cores: cpus().length, node: process.version, runs }, null, 2));
  console.log(`\nwritten to ${path.relative(process.cwd(), out)}`);
}
