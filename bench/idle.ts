// The idle scenario (`npm run bench -- --scenario idle`): N workers (default 5,000) long-poll
// get_job (wait=30) on a server with nothing to do, as a quiet network does most of the time.
// Measured from /proc: the server's CPU (share of one core) and resident memory while it holds
// them. Target (issue 12): under 10% of one core and 300 MB.
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { Pool } from 'undici';
import { freshDatabase, parseBackends, printRows, ROOT, startServer, importBenchNodes } from './common.js';

export interface IdleOptions {
  idle: number;
  duration: number;
  warmup: number;
  backends: string;
  databaseUrl: string;
  out: string | undefined;
}

const TICKS = 100; // USER_HZ on Linux

function cpuSeconds(pid: number): number {
  // Fields after the command name: utime and stime are the 14th and 15th fields of the line.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS;
}

const rssMb = (pid: number): number => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

export async function idleScenario(o: IdleOptions): Promise<void> {
  mkdirSync(path.join(ROOT, 'bench-results'), { recursive: true });
  const rows = [['backend', 'waiting workers', 'server CPU (share of one core) [<0.10]', 'server RSS MB [<300]', 'polls answered', 'errors']];
  let port = 19_000 + (process.pid % 500);
  const results = [];
  for (const backend of parseBackends(o.backends)) {
    const db = await freshDatabase(backend, o.databaseUrl, `ins_bench_idle_${process.pid}`);
    try {
      const nodes = await importBenchNodes(db.env, 'idle', Math.ceil(o.idle / 100));
      const server = await startServer(db.env, port++, path.join(ROOT, 'bench-results', `server-idle-${backend}.log`), { LOG_LEVEL: 'warn' });
      const pool = new Pool(server.url, {
        connections: o.idle + 16,
        pipelining: 1,
        keepAliveTimeout: 120_000,
        headersTimeout: 60_000,
        bodyTimeout: 60_000,
      });
      const json = async (method: 'GET' | 'POST', p: string, headers: Record<string, string>, body?: unknown) => {
        const res = await pool.request({
          method,
          path: p,
          headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
        return { status: res.statusCode, body: (await res.body.json()) as Record<string, unknown> };
      };
      try {
        console.log(`\n== ${backend}: registering ${o.idle} workers`);
        const tokens: string[] = [];
        for (let i = 0; i < o.idle; i += 200) {
          tokens.push(
            ...(await Promise.all(
              Array.from({ length: Math.min(200, o.idle - i) }, async (_, k) => {
                const n = nodes[(i + k) % nodes.length]!;
                const reg = await json(
                  'POST',
                  '/worker/register_node',
                  { authorization: `Bearer ${n.key}` },
                  { node_url: n.name, node_version: 'bench', stats: {} },
                );
                const token = String(reg.body.access_token);
                await json('POST', '/worker/update_models', { authorization: `Bearer ${token}` }, { node_url: n.name, models: ['idle-model'] });
                return token;
              }),
            )),
          );
        }
        let stop = false;
        let answered = 0;
        let errors = 0;
        const loops = tokens.map(async (token) => {
          while (!stop) {
            try {
              const r = await json('GET', '/worker/get_job?node_version=bench&wait=30', { authorization: `Bearer ${token}` });
              if (r.status === 200) answered++;
              else errors++;
            } catch {
              errors++;
              await new Promise((r) => setTimeout(r, 1000));
            }
          }
        });
        console.log(`   ${o.idle} workers polling; settling for ${o.warmup + 3} s, measuring for ${o.duration} s`);
        await new Promise((r) => setTimeout(r, (o.warmup + 3) * 1000));
        const answeredBefore = answered;
        const cpu0 = cpuSeconds(server.child.pid!);
        const t0 = performance.now();
        await new Promise((r) => setTimeout(r, o.duration * 1000));
        const share = (cpuSeconds(server.child.pid!) - cpu0) / ((performance.now() - t0) / 1000);
        const rss = rssMb(server.child.pid!);
        const result = {
          backend,
          workers: o.idle,
          cpuShare: Math.round(share * 1000) / 1000,
          rssMb: Math.round(rss),
          answered: answered - answeredBefore,
          errors,
        };
        results.push(result);
        console.log(`   ${JSON.stringify(result)}`);
        rows.push([
          backend,
          String(o.idle),
          `${result.cpuShare} [${share < 0.1 ? 'met' : 'MISSED'}]`,
          `${result.rssMb} [${rss < 300 ? 'met' : 'MISSED'}]`,
          String(result.answered),
          String(errors),
        ]);
        stop = true;
        await server.stop();
        await Promise.allSettled(loops);
      } finally {
        await pool.destroy();
        await server.stop();
      }
    } finally {
      await db.cleanup();
    }
  }
  printRows(rows);
  const out = o.out ?? path.join(ROOT, 'bench-results', `idle-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(out, JSON.stringify({ options: o, results }, null, 2));
  console.log(`\nwritten to ${path.relative(process.cwd(), out)}`);
}
