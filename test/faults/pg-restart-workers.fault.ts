// PostgreSQL stopped for a moment while workers of the coordinator poll and report with their
// job keys: the server rides the outage out (src/db/outage.ts) instead of answering 503 — a
// 5xx from update_result stops the real worker for hours — and every report ends as one
// credit. Restarts the machine's PostgreSQL: `npm run test:faults` only.
import { afterAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { openPostgres } from '../../src/db/pg.js';
import { createNode } from '../../src/nodes/lifecycle.js';
import { addApiKey } from '../../src/nodes/api-keys.js';
import { createPostgresDatabase, TEST_DATABASE_URL } from '../helpers/db.js';
import { startServerProcess, type ServerProcess } from '../helpers/process.js';
import { cluster, pgctl } from '../helpers/pg-cluster.js';
import { sleep } from '../helpers/wait.js';

describe.runIf(TEST_DATABASE_URL && cluster)('PostgreSQL restarted while workers report with job keys', () => {
  let server: ServerProcess | undefined;
  let drop: (() => Promise<void>) | undefined;
  afterAll(async () => {
    server?.child.kill('SIGTERM');
    await server?.exited;
    await drop?.();
  });

  it('answers the reports of a short outage with 200 once it is over, not 503', async () => {
    const created = await createPostgresDatabase(undefined, { durable: true });
    drop = created.drop;
    const setup = openPostgres({ connectionString: created.url });
    await migrate(setup);
    const { key } = await createNode(setup, 'steady');
    const userKey = (await addApiKey(setup, 'user', 'app')).key;
    await setup.close();
    server = await startServerProcess({ DATABASE_URL: created.url, SHUTDOWN_TIMEOUT_MS: '2000' });
    const url = server.url;
    const call = async (p: string, init: RequestInit = {}) => {
      const res = await fetch(`${url}${p}`, {
        ...init,
        headers: { 'content-type': 'application/json', ...init.headers },
        signal: AbortSignal.timeout(15_000),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const reg = await call('/worker/register_node', {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
      body: JSON.stringify({ node_url: 'steady', capacity: 6 }),
    });
    const auth = { authorization: `Bearer ${String(reg.body.access_token)}` };
    await call('/worker/update_models', { method: 'POST', headers: auth, body: JSON.stringify({ models: ['m'] }) });
    const jobs: { job_id: string; api_key: string }[] = [];
    for (let i = 0; i < 5; i++) {
      await call('/submit_job', {
        method: 'POST',
        headers: { api_key: userKey },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: `q${i}` }] }),
      });
      const got = await call('/worker/get_job', { headers: auth });
      jobs.push(got.body.job_data as { job_id: string; api_key: string });
    }

    pgctl('stop -m fast');
    // Reports (and a poll for the one free slot) sent while the database is away: they wait for it, then succeed.
    const during = [
      ...jobs.map((j) =>
        call('/worker/update_result', {
          method: 'POST',
          body: JSON.stringify({ job_id: j.job_id, api_key: j.api_key, model_name: 'm', result: { message: 'ok' }, status: 'success' }),
        }),
      ),
      call('/worker/get_job', { headers: auth }),
    ];
    await sleep(2000);
    pgctl('start');
    const answers = await Promise.all(during);
    expect(answers.map((a) => [a.status, a.body.detail])).toEqual([200, 200, 200, 200, 200, 200].map((s) => [s, undefined]));
    expect(answers.slice(0, 5).map((a) => a.body.points)).toEqual([1, 1, 1, 1, 1]);
    const points = await call('/get_points?node_name=steady', { headers: auth });
    expect(points.body.pointsraw).toBe(5);
  });
});
