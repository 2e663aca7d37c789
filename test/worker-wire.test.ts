// `ins worker`'s own wire, POST /worker/jobs/next (src/routes/worker/next-jobs.ts), on each
// backend through the real app: its leases are get_job's, a report and the next job go in one
// call, one call takes several leases and reports several jobs, a bad report refuses the call
// whole with nothing changed, a refused report still lets the call lease, and cancels and
// deadlines reach its leases as they reach get_job's.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';

interface Answer {
  job_id: string;
  accepted: boolean;
  status: string;
  points: number;
  replayed: boolean;
  detail?: string;
}

const reportOf = (job: Job, content = `answer to ${job.job_id}`, status: 'success' | 'error' = 'success') => ({
  job_id: job.job_id,
  api_key: job.api_key,
  model_name: job.model,
  result: { message: { role: 'assistant', content } },
  status,
});

describe.each(backends)('the worker wire (jobs/next) on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let user: TestUser;
  let userKey: string;
  let nodeNo = 0;
  const newWorker = async (models: string[], capacity?: number) => {
    const name = `wire-${++nodeNo}`;
    const key = await t.addNode(name);
    const w = await new TestWorker(t.app, name, key).start(models);
    if (capacity !== undefined) {
      // Registered again as `ins worker` registers, with its node key and a capacity (twice its --concurrency).
      const reg = await t.app.inject({
        method: 'POST',
        url: '/worker/register_node',
        headers: { authorization: `Bearer ${key}` },
        payload: { node_url: name, node_version: 'ins-worker', stats: {}, capacity },
      });
      expect(reg.statusCode, reg.body).toBe(200);
      w.token = (reg.json() as { access_token: string }).access_token;
      expect((await w.post('/worker/update_models', { node_url: name, models }, true)).statusCode).toBe(200);
    }
    return w;
  };
  const next = (w: TestWorker, body: { reports?: object[]; max_jobs?: number; wait?: number }) => w.post('/worker/jobs/next', body, true);
  const ok = async (w: TestWorker, body: Parameters<typeof next>[1]) => {
    const res = await next(w, body);
    expect(res.statusCode, res.body).toBe(200);
    return res.json() as { reports: Answer[]; jobs: Job[] };
  };
  const stateOf = async (id: string) =>
    (await t.db.query<{ state: string }>(sql('t_wire_state', 'SELECT state FROM jobs WHERE id = $1::uuid'), [id]))[0]?.state;
  const pointsOf = async (w: TestWorker) =>
    (
      (await t.app.inject({ method: 'GET', url: `/get_points?node_name=${w.node}`, headers: { authorization: `Bearer ${w.token}` } })).json() as {
        points: number;
      }
    ).points;

  beforeAll(async () => {
    t = await startApp(backend, { coordinator: { leaseTimeout: 60, sweepInterval: 0.1, maxAttempts: 3 } });
    userKey = await t.addUser();
    user = new TestUser(t.app, userKey);
  });
  afterAll(async () => t.close());

  it('leases as get_job does, and takes a report and the next job in one call; the report is committed and credited once', async () => {
    const w = await newWorker(['wire-model']);
    expect(await ok(w, { max_jobs: 1 })).toEqual({ reports: [], jobs: [] });
    const first = await user.submit('wire-model', 'first');
    const got = await ok(w, { max_jobs: 1 });
    expect(got.jobs).toEqual([expect.objectContaining({ job_id: first, model: 'wire-model', messages: [{ role: 'user', content: 'first' }] })]);
    expect(got.jobs[0]!.api_key).toMatch(/^jk_/);
    expect(await stateOf(first)).toBe('leased');
    const second = await user.submit('wire-model', 'second');
    const both = await ok(w, { reports: [reportOf(got.jobs[0]!, 'one')], max_jobs: 1 });
    expect(both.reports).toEqual([{ job_id: first, accepted: true, status: 'success', points: 1, replayed: false }]);
    expect(both.jobs.map((j) => j.job_id)).toEqual([second]);
    expect((await user.result(first)).json()).toMatchObject({ status: 'success', result: { message: { content: 'one' } } });
    // The same report again (a retried call): a replay, nothing credited; and on the seed's wire too.
    expect((await ok(w, { reports: [reportOf(got.jobs[0]!, 'one')], max_jobs: 0 })).reports).toEqual([
      { job_id: first, accepted: true, status: 'success', points: 0, replayed: true },
    ]);
    expect((await w.report(got.jobs[0]!, 'one')).json()).toMatchObject({ points: 0, replayed: true });
    expect(await ok(w, { reports: [reportOf(both.jobs[0]!, 'two')], max_jobs: 0 })).toMatchObject({
      reports: [{ accepted: true, points: 1 }],
      jobs: [],
    });
    expect(await pointsOf(w)).toBe(2);
  });

  it('holds several leases from one call and reports them together, within the session capacity', async () => {
    const w = await newWorker(['many-model'], 4);
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await user.submit('many-model', `q${i}`));
    const got = await ok(w, { max_jobs: 3 });
    expect(got.jobs.map((j) => j.job_id).sort()).toEqual(ids.slice(0, 3).sort());
    expect(new Set(got.jobs.map((j) => j.api_key)).size).toBe(3);
    // A fourth fits the capacity of 4; a fifth would not: the call leases no more, and gives up none of the three.
    const more = await ok(w, { max_jobs: 64 });
    expect(more.jobs.map((j) => j.job_id)).toEqual([ids[3]]);
    for (const id of ids.slice(0, 4)) expect(await stateOf(id)).toBe('leased');
    const held = [...got.jobs, ...more.jobs];
    const done = await ok(w, { reports: held.map((j) => reportOf(j)), max_jobs: 4 });
    expect(done.reports.map((r) => [r.job_id, r.accepted, r.points])).toEqual(held.map((j) => [j.job_id, true, 1]));
    expect(done.jobs.map((j) => j.job_id)).toEqual([ids[4]]);
    expect(await pointsOf(w)).toBe(4);
    await ok(w, { reports: [reportOf(done.jobs[0]!)], max_jobs: 0 });
  });

  it('refuses a call with a bad report whole: nothing recorded, nothing leased', async () => {
    const w = await newWorker(['bad-model']);
    const a = await user.submit('bad-model', 'a');
    const [job] = (await ok(w, { max_jobs: 1 })).jobs;
    const queued = await user.submit('bad-model', 'b');
    const cases: [object, RegExp][] = [
      [{ ...reportOf(job!), result: { nothing: 'here' } }, /reports\[1\]: A success needs the answer/],
      [{ ...reportOf(job!), api_key: await t.addNode('a-node-key') }, /reports\[1\]: only a job key/],
      [{ ...reportOf(job!), result: { message: { role: 'assistant', content: 'abc' }, tokens: ['a', 'x'] } }, /reports\[1\]: .*nothing was recorded/],
    ];
    for (const [bad, detail] of cases) {
      const res = await next(w, { reports: [reportOf(job!), bad], max_jobs: 1 });
      expect(res.statusCode, res.body).toBe(400);
      expect((res.json() as { detail: string }).detail).toMatch(detail);
      expect(await stateOf(a)).toBe('leased');
      expect(await stateOf(queued)).toBe('queued');
      expect(await pointsOf(w)).toBe(0);
    }
    // A body the schema refuses: 422, and still nothing.
    expect((await next(w, { reports: [{ job_id: a }], max_jobs: 1 })).statusCode).toBe(422);
    expect((await next(w, { max_jobs: -1 })).statusCode).toBe(422);
    // At most 64 reports a call (docs/security.md): a 65th refuses the call, the good one among them unrecorded.
    expect((await next(w, { reports: Array.from({ length: 65 }, () => reportOf(job!)), max_jobs: 1 })).statusCode).toBe(422);
    expect(await stateOf(a)).toBe('leased');
    expect(await stateOf(queued)).toBe('queued');
    // Without a session token: 401.
    const anonymous = await t.app.inject({ method: 'POST', url: '/worker/jobs/next', payload: { max_jobs: 1 } });
    expect(anonymous.statusCode).toBe(401);
    const fine = await ok(w, { reports: [reportOf(job!, 'a')], max_jobs: 1 });
    expect(fine.reports[0]).toMatchObject({ accepted: true, points: 1 });
    expect(fine.jobs.map((j) => j.job_id)).toEqual([queued]);
    await ok(w, { reports: [reportOf(fine.jobs[0]!)], max_jobs: 0 });
  });

  it('a canceled job: its lease ends (job_progress 400), its report is refused in the answer, and the call still leases', async () => {
    const w = await newWorker(['cancel-model']);
    const id = await user.submit('cancel-model', 'to cancel');
    const [job] = (await ok(w, { max_jobs: 1 })).jobs;
    expect((await w.post('/worker/job_progress', { job_id: id, api_key: job!.api_key, delta: '' })).statusCode).toBe(200);
    expect((await t.app.inject({ method: 'POST', url: `/cancel_job/${id}`, headers: { api_key: userKey } })).statusCode).toBe(200);
    expect((await w.post('/worker/job_progress', { job_id: id, api_key: job!.api_key, delta: '' })).statusCode).toBe(400);
    const other = await user.submit('cancel-model', 'next');
    const res = await ok(w, { reports: [reportOf(job!)], max_jobs: 1 });
    expect(res.reports).toEqual([
      { job_id: id, accepted: false, status: 'success', points: 0, replayed: false, detail: expect.stringMatching(/canceled/) },
    ]);
    expect(res.jobs.map((j) => j.job_id)).toEqual([other]);
    expect(await stateOf(id)).toBe('canceled');
    expect(await pointsOf(w)).toBe(0);
    await ok(w, { reports: [reportOf(res.jobs[0]!)], max_jobs: 0 });
  });

  it("a lease past the job's deadline: the job expires, its late report credits nothing", async () => {
    const w = await newWorker(['deadline-wire-model']);
    const id = await user.submit('deadline-wire-model', 'hurry', { request_timeout_time: 1 });
    const [job] = (await ok(w, { max_jobs: 1 })).jobs;
    expect(job!.job_id).toBe(id);
    expect((await user.result(id, 5)).json()).toMatchObject({ status: 'expired' });
    const late = await ok(w, { reports: [reportOf(job!)], max_jobs: 0 });
    expect(late.reports[0]).toMatchObject({ accepted: false, points: 0, detail: expect.stringMatching(/deadline passed.*nothing was credited/) });
    expect(await pointsOf(w)).toBe(0);
  });

  it('waits for a job with `wait`, as get_job does, after committing its report', async () => {
    const w = await newWorker(['wait-model']);
    const id = await user.submit('wait-model', 'one');
    const [job] = (await ok(w, { max_jobs: 1 })).jobs;
    const call = ok(w, { reports: [reportOf(job!, 'done')], max_jobs: 2, wait: 20 });
    // The report is committed while the call waits: its owner sees the answer before the next job exists.
    expect((await user.result(id, 10)).json()).toMatchObject({ status: 'success', result: { message: { content: 'done' } } });
    const later = await user.submit('wait-model', 'two');
    const got = await call;
    expect(got.reports[0]).toMatchObject({ accepted: true, points: 1 });
    expect(got.jobs.map((j) => j.job_id)).toEqual([later]);
    await ok(w, { reports: [reportOf(got.jobs[0]!)], max_jobs: 0 });
  });
});
