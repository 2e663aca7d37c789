// The queue alone, in one process and without HTTP, on PostgreSQL: P concurrent pairs each
// loop over one job's cycle — submit (send), lease (fetch) and complete — for a number of
// seconds; jobs/s and the cycle's p50/p99. The same workload for our coordinator (jobs/) and
// for pg-boss, the queue a user would pick, so the two compare in one run. pg-boss has no
// wake-up for a waiting fetcher (it polls), so its pair fetches in a tight loop: the fastest
// a pg-boss worker can take a job.
import { randomBytes } from 'node:crypto';
import PgBoss from 'pg-boss';
import { adminQuery, databaseUrlOf, percentile } from './common.js';
import { openPostgres } from '../src/db/pg.js';
import { migrate } from '../src/db/migrate.js';
import { DEFAULT_COORDINATOR } from '../src/config.js';
import { Coordinator } from '../src/jobs/coordinator.js';
import { createNode, NodeLifecycle } from '../src/nodes/lifecycle.js';
import { addApiKey } from '../src/nodes/api-keys.js';
import { findSessionByTokenHash, type SessionRow } from '../src/repositories/sessions.js';
import { declareSet } from '../src/nodes/sql/declare.js';
import { ensureModelId } from '../src/repositories/models.js';
import { hashKey } from '../src/keys.js';

export interface CycleResult {
  queue: string;
  pairs: number;
  jobsPerSecond: number;
  p50: number;
  p99: number;
}

const now = () => performance.now();

async function pairsFor(
  seconds: number,
  pairs: number,
  one: (pair: number) => Promise<void>,
): Promise<{ jobsPerSecond: number; p50: number; p99: number }> {
  const latencies: number[] = [];
  const warmupEnd = now() + 1_000;
  const end = warmupEnd + seconds * 1000;
  let counted = 0;
  await Promise.all(
    Array.from({ length: pairs }, async (_, pair) => {
      while (now() < end) {
        const t0 = now();
        await one(pair);
        const t1 = now();
        if (t0 >= warmupEnd && t1 <= end) {
          counted++;
          latencies.push(t1 - t0);
        }
      }
    }),
  );
  latencies.sort((a, b) => a - b);
  const round = (x: number) => Math.round(x * 10) / 10;
  return { jobsPerSecond: Math.round(counted / seconds), p50: round(percentile(latencies, 50)), p99: round(percentile(latencies, 99)) };
}

async function withDatabase<T>(serverUrl: string, f: (url: string) => Promise<T>): Promise<T> {
  const name = `ins_bench_cycle_${process.pid}_${randomBytes(3).toString('hex')}`;
  await adminQuery(serverUrl, `CREATE DATABASE ${name}`);
  try {
    return await f(databaseUrlOf(serverUrl, name));
  } finally {
    await adminQuery(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
}

/** Our coordinator: each pair is a worker session of its own; submit, next (which waits for the job), complete. */
export async function ourQueueCycle(serverUrl: string, pairs: number, seconds: number): Promise<CycleResult> {
  return withDatabase(serverUrl, async (url) => {
    const db = openPostgres({ connectionString: url, max: 20 });
    await migrate(db);
    const model = 'cycle-model';
    const modelId = await ensureModelId(db, model);
    const owner = (await addApiKey(db, 'user', 'cycle')).id;
    const sessions: SessionRow[] = [];
    for (let i = 0; i < pairs; i++) {
      const node = await createNode(db, `cycle-${i}`);
      const s = await new NodeLifecycle(db).register({
        name: `cycle-${i}`,
        offered: [node.key],
        address: 'bench',
        nodeVersion: 'bench',
        stats: {},
        capacity: 1,
      });
      if ('refused' in s) throw new Error(`register: ${s.refused}`);
      const session = (await findSessionByTokenHash(db, hashKey(s.token), 3600))!;
      await declareSet(db, session.id, [modelId]);
      sessions.push((await findSessionByTokenHash(db, hashKey(s.token), 3600))!);
    }
    const c = await Coordinator.start(db, { ...DEFAULT_COORDINATOR, defaultPointsPerJob: 1, audit: false, onError: (e) => console.error(e) });
    try {
      const r = await pairsFor(seconds, pairs, async (pair) => {
        const session = sessions[pair]!;
        await c.submit({
          ownerKeyId: owner,
          model,
          request: { messages: [{ role: 'user', content: 'x' }], max_output: 0, temperature: 0 },
          timeoutSeconds: 240,
        });
        const job = (await c.next(session, 10_000, () => false))!;
        const result = { message: 'y' };
        await c.complete({
          keyHash: job.keyHash,
          jobId: job.jobId,
          modelName: model,
          status: 'success',
          result,
          answer: { message: { role: 'assistant', content: 'y' } },
          usage: null,
        });
      });
      return { queue: 'ours (src/jobs)', pairs, ...r };
    } finally {
      await c.close();
      await db.close();
    }
  });
}

/** pg-boss: send, fetch until a job comes, complete. */
export async function pgBossCycle(serverUrl: string, pairs: number, seconds: number): Promise<CycleResult> {
  return withDatabase(serverUrl, async (url) => {
    const boss = new PgBoss({ connectionString: url, max: 20, schedule: false, supervise: false });
    boss.on('error', (e) => console.error(e));
    await boss.start();
    const queue = 'cycle';
    await boss.createQueue(queue);
    try {
      const r = await pairsFor(seconds, pairs, async () => {
        await boss.send(queue, { prompt: 'x' });
        for (;;) {
          const [job] = await boss.fetch(queue);
          if (job) {
            await boss.complete(queue, job.id, { message: 'y' });
            return;
          }
        }
      });
      return { queue: `pg-boss ${String((await import('pg-boss/package.json', { with: { type: 'json' } })).default.version)}`, pairs, ...r };
    } finally {
      await boss.stop({ graceful: false, wait: true });
    }
  });
}
