// A report rides out a short loss of the database inside the server (src/db/outage.ts) rather
// than answering 503, which stops the seed's worker for hours — with a job key and, as the
// original contract's reports, with a node key. The loss is real: the server reaches
// PostgreSQL through a TCP forwarder that drops its connections (test/helpers/tcp-gate.ts).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { migrate } from '../src/db/migrate.js';
import { openPostgres } from '../src/db/pg.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { addApiKey } from '../src/nodes/api-keys.js';
import { createPostgresDatabase, templateName, TEST_DATABASE_URL } from './helpers/db.js';
import { report } from './helpers/app.js';
import { startTcpGate, type TcpGate } from './helpers/tcp-gate.js';

describe.runIf(TEST_DATABASE_URL)('reports while the database is briefly unreachable', () => {
  let gate: TcpGate;
  let app: Awaited<ReturnType<typeof buildApp>>;
  let drop: () => Promise<void>;
  let db: ReturnType<typeof openPostgres>;
  let key: string;

  beforeAll(async () => {
    // The suite's migrated template (test/helpers/db.ts) exists once any PostgreSQL test ran; else migrate here.
    const created = await createPostgresDatabase(templateName()).catch(() => createPostgresDatabase());
    drop = created.drop;
    const target = new URL(created.url);
    gate = await startTcpGate(target.hostname, Number(target.port || 5432));
    const gated = new URL(created.url);
    gated.port = String(gate.port);
    db = openPostgres({ connectionString: gated.toString(), max: 4 });
    await migrate(db);
    app = await buildApp({ db, verify: { enabled: false } });
    key = (await createNode(db, 'steady-rig')).key;
  });
  afterAll(async () => {
    gate.open();
    await app.close();
    await db.close();
    await gate.close();
    await drop();
  });

  it('a node-key report sent while the connections drop is answered 200 once they come back, and credited once', async () => {
    expect((await app.inject({ method: 'POST', url: '/worker/update_result', payload: report(key, { job_id: 'before-the-loss' }) })).statusCode).toBe(
      200,
    );
    gate.shut();
    const during = app.inject({ method: 'POST', url: '/worker/update_result', payload: report(key, { job_id: 'during-the-loss' }) });
    // The server has tried, and been refused, before the database comes back.
    await expect.poll(() => gate.refused).toBeGreaterThan(0);
    gate.open();
    const res = await during;
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toEqual({ job_id: 'during-the-loss', status: 'success', points: 1, replayed: false });
  });

  it("a user's poll of get_result rides out the loss too, and past the budget is still a 404 (the seed's clients end their poll on anything else)", async () => {
    const userKey = (await addApiKey(db, 'user', 'poller')).key;
    const submitted = await app.inject({
      method: 'POST',
      url: '/submit_job',
      headers: { api_key: userKey },
      payload: { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_output: 8, temperature: 0 },
    });
    expect(submitted.statusCode).toBe(200);
    const jobId = (submitted.json() as { job_id: string }).job_id;
    // Another server on the same database: it knows nothing of the job or the key, so it reads both.
    const other = await buildApp({ db, verify: { enabled: false } });
    try {
      const poll = () => other.inject({ method: 'GET', url: `/get_result/${jobId}`, headers: { api_key: userKey } });
      gate.shut();
      const during = poll();
      await expect.poll(() => gate.refused).toBeGreaterThan(0);
      gate.open();
      const res = await during;
      expect(res.statusCode, res.body).toBe(404);
      expect(res.json()).toMatchObject({ detail: 'Job not finished', state: 'queued' });
      // Past the budget (db/outage.ts, 5 s): a 404 saying why, with Retry-After, rather than a 503.
      const third = await buildApp({ db, verify: { enabled: false } });
      try {
        gate.shut();
        const late = await third.inject({ method: 'GET', url: `/get_result/${jobId}`, headers: { api_key: userKey } });
        expect(late.statusCode, late.body).toBe(404);
        expect(late.json()).toEqual({ detail: 'Job status unknown for now: the database is unavailable; retry later' });
        expect(late.headers['retry-after']).toBe('1');
      } finally {
        gate.open();
        await third.close();
      }
    } finally {
      await other.close();
    }
  });
});
