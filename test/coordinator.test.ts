// The coordinator on each backend, through the real app and the wire of the seed system's real
// worker and clients: the whole loop, who may register, races, leases that end, deadlines,
// deregistration, and exactly-once crediting under load.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { totalPoints } from './helpers/state.js';
import { leaseJobs } from '../src/jobs/sql/lease.js';
import { releaseLeases } from '../src/jobs/sql/release.js';
import { newKey } from '../src/keys.js';

const MODEL = 'llama3.2:latest';

describe.each(backends)('coordinator on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let user: TestUser;
  let nodeNo = 0;
  const newWorker = async (models = [MODEL], address?: string) => {
    const name = `w-${++nodeNo}`;
    return new TestWorker(t.app, name, await t.addNode(name), address).start(models);
  };
  const count = async (text: string, values: unknown[] = []) => (await t.db.query<{ n: number }>(sql(`t_${text.length}`, text), values))[0]!.n;

  beforeAll(async () => {
    t = await startApp(backend, { coordinator: { leaseTimeout: 0.6, sweepInterval: 0.1, maxAttempts: 3 } });
    user = new TestUser(t.app, await t.addUser());
  });
  afterAll(async () => t.close());

  it('runs the real worker loop: check_node_secret, register without a credential, update_models, get_job, update_result with the job key, get_result', async () => {
    const worker = await newWorker();
    const jobId = await user.submit(MODEL, 'What is 2+2?');
    expect((await user.result(jobId)).statusCode).toBe(404);
    const job = (await worker.getJob())!;
    expect(job).toMatchObject({ job_id: jobId, model: MODEL, messages: [{ role: 'user', content: 'What is 2+2?' }], max_output: 0, temperature: 0 });
    expect(job.api_key).toMatch(/^jk_/);
    const pending = await user.result(jobId);
    expect(pending.statusCode).toBe(404);
    expect(pending.json()).toMatchObject({ detail: 'Job not finished', state: 'queued' });
    const res = await worker.report(job, '4');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ job_id: jobId, status: 'success', points: 1, replayed: false });
    const done = await user.result(jobId);
    expect(done.statusCode).toBe(200);
    expect(done.json()).toEqual({ status: 'success', job_id: jobId, result: { message: { role: 'assistant', content: '4' } } });
    // The same report again is a replay; the node was credited once, and counts as serving the model.
    expect((await worker.report(job, '4')).json()).toEqual({ job_id: jobId, status: 'success', points: 0, replayed: true });
    const points = await t.app.inject({
      method: 'GET',
      url: `/get_points?node_name=${worker.node}`,
      headers: { authorization: `Bearer ${worker.token}` },
    });
    expect(points.json()).toEqual({ node_name: worker.node, points: 1, pointsraw: 1 });
    const unique = await t.app.inject({ method: 'GET', url: `/unique_nodes?model_name=${encodeURIComponent(MODEL)}` });
    expect((unique.json() as { nodes: string[] }).nodes).toContain(worker.node);
    const time = await t.app.inject({
      method: 'GET',
      url: `/get_completion_time/${jobId}`,
      headers: { api_key: (user as unknown as { key: string }).key },
    });
    expect(time.json()).toMatchObject({ job_id: jobId, status: 'done', completion_time: expect.any(Number) });
  });

  it('gives no token to whoever does not hold the node key', async () => {
    const name = `guarded-${++nodeNo}`;
    const key = await t.addNode(name);
    const register = (headers: Record<string, string>, address: string, body: object = {}) =>
      t.app.inject({
        method: 'POST',
        url: '/worker/register_node',
        remoteAddress: address,
        headers,
        payload: { node_url: name, node_version: '1', stats: {}, ...body },
      });
    expect((await register({}, '10.0.0.9')).statusCode).toBe(401);
    expect((await register({ authorization: 'Bearer nk_wrong' }, '10.0.0.9')).statusCode).toBe(401);
    expect((await register({}, '10.0.0.9', { secret: 'nk_wrong' })).statusCode).toBe(401);
    // A wrong secret does not open the door, nor does a right one checked from another address.
    expect(
      (await t.app.inject({ method: 'POST', url: '/check_node_secret', remoteAddress: '10.0.0.9', payload: { node_id: name, secret: 'nope' } }))
        .statusCode,
    ).toBe(401);
    expect((await register({}, '10.0.0.9')).statusCode).toBe(401);
    expect(
      (await t.app.inject({ method: 'POST', url: '/check_node_secret', remoteAddress: '10.0.0.8', payload: { node_id: name, secret: key } }))
        .statusCode,
    ).toBe(200);
    expect((await register({}, '10.0.0.9')).statusCode).toBe(401);
    expect((await register({}, '10.0.0.8')).statusCode).toBe(200);
    // The key itself, in any of the three places, works from anywhere.
    expect((await register({ authorization: `Bearer ${key}` }, '10.0.0.7')).statusCode).toBe(200);
    expect((await register({ api_key: key }, '10.0.0.7')).statusCode).toBe(200);
    expect((await register({}, '10.0.0.7', { secret: key })).statusCode).toBe(200);
    expect(await count('SELECT count(*)::int AS n FROM node_sessions s JOIN nodes n ON n.id = s.node_id WHERE n.name = $1', [name])).toBe(4);
  });

  it('leases a job to one of two racing nodes only', async () => {
    const a = await newWorker(['race-model']);
    const b = await newWorker(['race-model']);
    for (let round = 0; round < 5; round++) {
      const jobId = await user.submit('race-model');
      const [ja, jb] = await Promise.all([a.getJob(), b.getJob()]);
      const got = [ja, jb].filter((j): j is Job => j !== null);
      expect(got.map((j) => j.job_id)).toEqual([jobId]);
      expect((await (ja ? a : b).report(got[0]!)).statusCode).toBe(200);
    }
  });

  it('puts a job back when its lease expires; the late report is refused with 400 and credits nothing', async () => {
    const slow = await newWorker(['expiry-model']);
    const fast = await newWorker(['expiry-model']);
    const jobId = await user.submit('expiry-model');
    const first = (await slow.getJob())!;
    expect(first.job_id).toBe(jobId);
    const second = (await fast.getJob(5))!;
    expect(second.job_id).toBe(jobId);
    expect(second.api_key).not.toBe(first.api_key);
    const late = await slow.report(first);
    expect(late.statusCode).toBe(400);
    expect((late.json() as { detail: string }).detail).toMatch(/lease expired/);
    expect((await fast.report(second, 'on time')).json()).toMatchObject({ status: 'success', points: 1 });
    expect((await user.result(jobId)).json()).toMatchObject({ status: 'success', result: { message: { content: 'on time' } } });
    expect(await count('SELECT count(*)::int AS n FROM job_results WHERE job_id = $1', [jobId])).toBe(1);
    expect(await count('SELECT attempts AS n FROM jobs WHERE id = $1', [jobId])).toBe(2);
  });

  it('expires a job at its deadline and tells the user so', async () => {
    const jobId = await user.submit('nobody-serves-this', 'hi', { request_timeout_time: 1 });
    const res = await user.result(jobId, 5);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ status: 'expired', job_id: jobId, result: { message: { content: '' } } });
  });

  it('expires a leased job at its deadline; the late report of its holder is refused with 400 and credits nothing', async () => {
    const w = await newWorker(['deadline-model']);
    const jobId = await user.submit('deadline-model', 'hi', { request_timeout_time: 1 });
    const job = (await w.getJob())!;
    expect((await user.result(jobId, 5)).json()).toMatchObject({ status: 'expired' });
    const late = await w.report(job);
    expect(late.statusCode).toBe(400);
    // (Its lease, 0.6 s here, ended before the deadline did: either reason refuses the report.)
    expect((late.json() as { detail: string }).detail).toMatch(/(lease expired|deadline passed).*nothing was credited/);
    expect(await count('SELECT count(*)::int AS n FROM job_results WHERE job_id = $1', [jobId])).toBe(0);
  });

  it('returns the leases of a deregistered node to the queue at once', async () => {
    const leaving = await newWorker(['leave-model']);
    const staying = await newWorker(['leave-model']);
    const jobId = await user.submit('leave-model');
    const held = (await leaving.getJob())!;
    expect(held.job_id).toBe(jobId);
    expect((await leaving.deregister()).statusCode).toBe(200);
    expect((await leaving.getJobRaw()).statusCode).toBe(401);
    const again = (await staying.getJob())!;
    expect(again.job_id).toBe(jobId);
    expect((await staying.report(again)).statusCode).toBe(200);
    // The job key of the lease it gave back is worth nothing now.
    const late = await leaving.report(held);
    expect(late.statusCode).toBe(400);
    expect((late.json() as { detail: string }).detail).toMatch(/given back/);
    expect(await count("SELECT count(*)::int AS n FROM job_results WHERE job_id = $1 AND status = 'success'", [jobId])).toBe(1);
  });

  it('leases a job again after a lease its worker never got (no attempt, no clash of attempt numbers)', async () => {
    const w = await newWorker(['undelivered-model']);
    const jobId = await user.submit('undelivered-model');
    const [s] = await t.db.query<{ id: number; node_id: number; model: number }>(
      sql(
        't_session',
        `SELECT s.id::int, s.node_id::int, s.models[1] AS model
      FROM node_sessions s JOIN nodes n ON n.id = s.node_id WHERE n.name = $1::text AND s.ended_at IS NULL`,
      ),
      [w.node],
    );
    // The worker hung up before each lease reached it, twice (jobs/dispatcher.ts deliver).
    for (let i = 0; i < 2; i++) {
      const key = newKey('job');
      const round = await leaseJobs(
        t.db,
        [{ group: 1, slot: 1, sessionId: s!.id, nodeId: s!.node_id, keyHash: key.hash, rank: 1 }],
        [{ group: 1, models: [s!.model], count: 1 }],
        60,
      );
      expect(round.rows).toEqual([expect.objectContaining({ jobId, attempt: 1 })]);
      expect((await releaseLeases(t.db, { keyHashes: [key.hash] }, 'released', true, 'test')).requeuedLeases.get(jobId)).toBe(1);
    }
    const job = (await w.getJob())!;
    expect(job.job_id).toBe(jobId);
    expect((await w.report(job)).statusCode).toBe(200);
    expect(await count('SELECT count(*)::int AS n FROM job_leases WHERE job_id = $1', [jobId])).toBe(1);
  });

  it('fails a job after MAX_ATTEMPTS error reports, each by another node (a node never gets back a job it failed)', async () => {
    const workers = [
      await newWorker(['flaky-model']),
      await newWorker(['flaky-model']),
      await newWorker(['flaky-model']),
      await newWorker(['flaky-model']),
    ];
    const jobId = await user.submit('flaky-model');
    for (let i = 0; i < 3; i++) {
      const w = workers[i]!;
      const job = (await w.getJob())!;
      expect(job.job_id).toBe(jobId);
      expect((await w.report(job, 'oops', 'error')).json()).toMatchObject({ status: 'error', points: 0 });
      expect(await w.getJob()).toBeNull();
    }
    expect(await workers[3]!.getJob()).toBeNull();
    expect((await user.result(jobId)).json()).toMatchObject({ status: 'failed', result: { message: { content: '' } } });
  });

  it('wakes a long-polling worker when a job is queued', async () => {
    const w = await newWorker(['wake-model']);
    const polled = w.getJob(30);
    await expect.poll(() => t.app.service.coordinator.waitingWorkers).toBeGreaterThanOrEqual(1);
    const jobId = await user.submit('wake-model');
    const job = await polled;
    expect(job?.job_id).toBe(jobId);
    await w.report(job!);
  });

  it('shows a user only its own jobs', async () => {
    const other = new TestUser(t.app, await t.addUser('other'));
    const jobId = await user.submit('private-model');
    expect((await other.result(jobId)).statusCode).toBe(404);
    expect((await other.result('not-a-uuid')).statusCode).toBe(404);
    const reader = await t.addReader();
    expect(
      (
        await t.app.inject({
          method: 'POST',
          url: '/submit_job',
          headers: { api_key: reader },
          payload: { model: 'm', messages: [{ role: 'user', content: 'x' }] },
        })
      ).statusCode,
    ).toBe(403);
    expect((await t.app.inject({ method: 'POST', url: '/submit_job', payload: { model: 'm', messages: [] } })).statusCode).toBe(401);
  });

  it('tells the network: available models, active nodes, jobs', async () => {
    const w = await newWorker(['listed-model']);
    // One job done, one lease expired (then done), one job past its deadline.
    await user.submit('listed-model');
    await w.report((await w.getJob())!);
    await user.submit('listed-model');
    expect(await w.getJob()).not.toBeNull();
    const other = await newWorker(['listed-model']);
    await other.report((await other.getJob(5))!);
    await user.result(await user.submit('nobody-lists-this', 'hi', { request_timeout_time: 1 }), 5);
    const models = (await t.app.inject({ method: 'GET', url: '/available_models' })).json() as { models: string[] };
    expect(models.models).toContain('listed-model');
    const active = (await t.app.inject({ method: 'GET', url: '/active_node_count' })).json() as { active_node_count: number };
    expect(active.active_node_count).toBeGreaterThan(0);
    const total = (await t.app.inject({ method: 'GET', url: '/total_job_count' })).json() as {
      total_job_count: number;
      by_state: Record<string, number>;
    };
    expect(total.total_job_count).toBe(Object.values(total.by_state).reduce((a, b) => a + b, 0));
    expect(total.total_job_count).toBeGreaterThan(0);
    // The dashboard's view of the network, and a node's own view.
    // With a user key: the per-model node counts and the recent jobs' nodes (a stranger sees neither: test/declared-context.test.ts).
    const network = (await t.app.inject({ method: 'GET', url: '/network', headers: { api_key: user.key } })).json() as {
      jobs_per_minute: number;
      models: { name: string; nodes: number }[];
      recent: { model: string; node: string }[];
    };
    expect(network.models).toContainEqual(expect.objectContaining({ name: 'listed-model', nodes: 2 }));
    expect(network.jobs_per_minute).toBeGreaterThanOrEqual(2);
    expect(network.recent).toContainEqual(expect.objectContaining({ model: 'listed-model', node: other.node }));
    const mine = await t.app.inject({ method: 'GET', url: `/network/nodes/${w.node}`, headers: { authorization: `Bearer ${w.token}` } });
    expect(mine.json()).toMatchObject({ name: w.node, online: true, models: ['listed-model'], open_leases: 0 });
    expect((mine.json() as { jobs: { outcome: string }[] }).jobs.map((j) => j.outcome)).toEqual(['expired', 'done']);
    expect((await t.app.inject({ method: 'GET', url: `/network/nodes/${w.node}`, headers: { api_key: await t.addReader('net') } })).statusCode).toBe(
      200,
    );
    expect(
      (await t.app.inject({ method: 'GET', url: `/network/nodes/${w.node}`, headers: { authorization: `Bearer ${other.token}` } })).statusCode,
    ).toBe(403);
    expect((await t.app.inject({ method: 'GET', url: '/network/nodes/nobody', headers: { api_key: await t.addReader('net2') } })).statusCode).toBe(
      404,
    );
    // And the operator's metrics: queue depth by model, leases, waiting workers, dispatch latency, final states, expiries.
    await user.submit('metered-model');
    const metrics = (await t.app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toMatch(/ins_jobs_queued\{model="metered-model"\} 1/);
    expect(metrics).toMatch(/ins_job_leases_open \d+/);
    expect(metrics).toMatch(/ins_workers_waiting \d+/);
    expect(metrics).toMatch(/ins_dispatch_latency_seconds_count [1-9]/);
    expect(metrics).toMatch(/ins_jobs_finished_total\{state="done"\} [1-9]/);
    expect(metrics).toMatch(/ins_jobs_finished_total\{state="expired"\} [1-9]/);
    expect(metrics).toMatch(/ins_lease_expiries_total [1-9]/);
    expect(metrics).toMatch(/ins_jobs_submitted_total [1-9]/);
  });
});

describe.each(backends)('coordinator under load on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  it('50 workers × 2,000 jobs: each job done once, points exactly the jobs done', async () => {
    t = await startApp(backend);
    const user = new TestUser(t.app, await t.addUser());
    const workers = await Promise.all(
      Array.from({ length: 50 }, async (_, i) => new TestWorker(t.app, `load-${i}`, await t.addNode(`load-${i}`)).start(['load-model'])),
    );
    const total = 2_000;
    const ids: string[] = [];
    const submitting = (async () => {
      for (let i = 0; i < total; i += 50) ids.push(...(await Promise.all(Array.from({ length: 50 }, () => user.submit('load-model')))));
    })();
    const doneBy = new Map<string, string>();
    let finished = false;
    await Promise.all([
      submitting.then(() => {
        finished = true;
      }),
      ...workers.map(async (w) => {
        for (;;) {
          const job = await w.getJob(1);
          if (!job) {
            if (finished && doneBy.size >= total) return;
            continue;
          }
          const res = await w.report(job);
          expect(res.statusCode).toBe(200);
          expect(doneBy.has(job.job_id)).toBe(false);
          doneBy.set(job.job_id, w.node);
        }
      }),
    ]);
    expect(doneBy.size).toBe(total);
    expect(new Set(ids)).toEqual(new Set(doneBy.keys()));
    const [row] = await t.db.query<{ done: number; leases: number }>(
      sql('load_counts', "SELECT count(*) FILTER (WHERE state = 'done')::int AS done, (SELECT count(*)::int FROM job_leases) AS leases FROM jobs"),
    );
    expect(row).toEqual({ done: total, leases: total });
    expect(await totalPoints(t.db)).toBe(total);
    const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
    expect(stored).toEqual(recomputed);
  });

  it('CREDIT_POLICY=dispatched refuses invented job ids and changes nothing', async () => {
    t = await startApp(backend, { coordinator: { creditPolicy: 'dispatched' } });
    const key = await t.addNode('inventive');
    const res = await t.app.inject({
      method: 'POST',
      url: '/worker/update_result',
      payload: { job_id: 'made-up-1', api_key: key, model_name: MODEL, result: { message: 'x' }, status: 'success' },
    });
    expect(res.statusCode).toBe(403);
    expect(await totalPoints(t.db)).toBe(0);
    expect((await t.db.query(sql('none', 'SELECT 1 FROM job_results'))).length).toBe(0);
    // A job that was leased to the node may be reported with the node key too.
    const user = new TestUser(t.app, await t.addUser());
    const w = await new TestWorker(t.app, 'inventive', key).start([MODEL]);
    const jobId = await user.submit(MODEL);
    const job = (await w.getJob())!;
    const byNodeKey = await t.app.inject({
      method: 'POST',
      url: '/worker/update_result',
      payload: { job_id: job.job_id, api_key: key, model_name: MODEL, result: { message: 'ok' }, status: 'success' },
    });
    expect(byNodeKey.json()).toEqual({ job_id: jobId, status: 'success', points: 1, replayed: false });
  });

  it('a job id spelt otherwise (capitals, no hyphens) is the job: its own node ends its lease so, and past retention nobody is credited twice', async () => {
    t = await startApp(backend);
    const user = new TestUser(t.app, await t.addUser());
    const key = await t.addNode('own-speller');
    const w = await new TestWorker(t.app, 'own-speller', key).start([MODEL]);
    const jobId = await user.submit(MODEL);
    expect((await w.getJob())!.job_id).toBe(jobId);
    const report = (k: string, id: string) =>
      t.app.inject({
        method: 'POST',
        url: '/worker/update_result',
        payload: { job_id: id, api_key: k, model_name: MODEL, result: { message: 'ok' }, status: 'success' },
      });
    // Its own lease, reported with the node key under capitals: ended and credited, the answer echoing the report's spelling.
    expect((await report(key, jobId.toUpperCase())).json()).toEqual({ job_id: jobId.toUpperCase(), status: 'success', points: 1, replayed: false });
    // Past retention (the jobs row and its leases deleted, the result kept): another spelling is the same job still.
    await t.db.query(sql('t_spell_prune', 'DELETE FROM job_leases WHERE job_id = $1::uuid'), [jobId]);
    await t.db.query(sql('t_spell_prune_job', 'DELETE FROM jobs WHERE id = $1::uuid'), [jobId]);
    expect((await report(await t.addNode('late-speller'), jobId.replace(/-/g, ''))).statusCode).toBe(409);
    expect((await report(key, `{${jobId}}`)).json()).toMatchObject({ status: 'success', points: 0, replayed: true });
    expect(await totalPoints(t.db)).toBe(1);
    // With the job key too: the key names the job, whichever way its id is spelt.
    const second = await user.submit(MODEL, 'second');
    const job = (await w.getJob())!;
    expect(job.job_id).toBe(second);
    const byJobKey = await t.app.inject({
      method: 'POST',
      url: '/worker/update_result',
      payload: { job_id: second.toUpperCase(), api_key: job.api_key, model_name: MODEL, result: { message: 'ok' }, status: 'success' },
    });
    expect(byJobKey.json()).toEqual({ job_id: second.toUpperCase(), status: 'success', points: 1, replayed: false });
  });

  it.each(['reports', 'dispatched'] as const)(
    'CREDIT_POLICY=%s: a node key reporting a job leased elsewhere gets 400 if its own lease ended, else 409 or 403',
    async (creditPolicy) => {
      t = await startApp(backend, { coordinator: { creditPolicy } });
      const user = new TestUser(t.app, await t.addUser());
      const keyA = await t.addNode('first-holder');
      const a = await new TestWorker(t.app, 'first-holder', keyA).start([MODEL]);
      const jobId = await user.submit(MODEL);
      expect((await a.getJob())!.job_id).toBe(jobId);
      // A deregisters: its lease is given back, and the job goes to B.
      expect((await a.deregister()).statusCode).toBe(200);
      const b = await new TestWorker(t.app, 'second-holder', await t.addNode('second-holder')).start([MODEL]);
      const job = (await b.getJob())!;
      expect(job.job_id).toBe(jobId);
      const report = (key: string, id = jobId) =>
        t.app.inject({
          method: 'POST',
          url: '/worker/update_result',
          payload: { job_id: id, api_key: key, model_name: MODEL, result: { message: 'mine' }, status: 'success' },
        });
      // A held the job before: its report answers as its ended lease's job key would (400 keeps an honest worker polling).
      const late = await report(keyA);
      expect(late.statusCode).toBe(400);
      expect(late.json().detail).toMatch(/given back.*nothing was credited/);
      // C never held it.
      const stranger = await report(await t.addNode('stranger'));
      expect(stranger.statusCode).toBe(creditPolicy === 'reports' ? 409 : 403);
      expect(stranger.json().detail).toBe(`Job ${jobId} is a job of this network that was never leased to this node`);
      // Nor under another spelling of its id that PostgreSQL reads as the same UUID.
      const strangerKey = await t.addNode('speller');
      for (const spelt of [jobId.replace(/-/g, ''), `{${jobId}}`, jobId.toUpperCase(), `{${jobId.replace(/-/g, '').toUpperCase()}}`]) {
        expect((await report(strangerKey, spelt)).statusCode, spelt).toBe(creditPolicy === 'reports' ? 409 : 403);
      }
      expect(await totalPoints(t.db)).toBe(0);
      expect((await b.report(job)).json()).toMatchObject({ job_id: jobId, points: 1, replayed: false });
      expect(await totalPoints(t.db)).toBe(1);
    },
  );
});
