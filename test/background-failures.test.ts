// A background task whose statement fails must not take the server down (Node exits on an
// unhandled rejection): each is logged and counted (ins_background_failures_total), and the
// server serves on. Here the database refuses the statements of three background tasks — the
// presence flush, the dispatcher's once-a-second check, the refresh of where polled jobs stand.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { addApiKey } from '../src/nodes/api-keys.js';
import { createNode } from '../src/nodes/lifecycle.js';
import type { Database } from '../src/db/database.js';
import { backends, beforeEachQuery } from './helpers/db.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';

const FAILING = new Set(['sessions_touch', 'jobs_queued_models', 'jobs_standings']);

describe.each(backends)('background failures on $name', (backend) => {
  let db: Database;
  let app: Awaited<ReturnType<typeof buildApp>>;
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown) => unhandled.push(err);

  beforeAll(async () => {
    process.on('unhandledRejection', onUnhandled);
    db = await backend.open();
    const failing = beforeEachQuery(db, (s) => {
      if (FAILING.has(s.name)) throw new Error(`injected failure of ${s.name}`);
    });
    app = await buildApp({ db: failing, verify: { enabled: false }, coordinator: { sweepInterval: 0.05 } });
  });
  afterAll(async () => {
    process.off('unhandledRejection', onUnhandled);
    await app.close();
    await db.close();
  });

  const failures = async () => {
    const text = await app.metrics.registry.metrics();
    return [...text.matchAll(/^ins_background_failures_total\{task="coordinator"\} (\d+)$/gm)].reduce((n, m) => n + Number(m[1]), 0);
  };

  it('logs and counts the failures, and serves on', async () => {
    const user = new TestUser(app, (await addApiKey(db, 'user', 'u')).key);
    const worker = await new TestWorker(app, 'bg-node', (await createNode(db, 'bg-node')).key).start(['bg-model']);
    // A long poll keeps the dispatcher's check busy; a polled job keeps the refresh busy.
    const waiting = worker.getJob(30);
    const jobId = await user.submit('other-model', 'poll me');
    expect((await user.result(jobId)).statusCode).toBe(404);
    await expect.poll(failures, { timeout: 20_000 }).toBeGreaterThanOrEqual(3);
    // Still serving: a job goes through, and the waiting poll gets it.
    const served = await user.submit('bg-model', 'still here');
    expect((await waiting)?.job_id).toBe(served);
    expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    expect(unhandled).toEqual([]);
  });
});
