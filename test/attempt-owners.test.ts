// Every failed attempt has an owner (issue 29; docs/coordinator.md, "Whose fault an attempt's
// end is"), each attack performed against the real app on both backends: one node failing
// users' jobs with error reports, a node charging any number of tokens to a job's owner, a node
// keeping its streamed jobs from being checked (a continued answer, and checks it could tell
// apart from users' jobs on the worker wire).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { sql } from '../src/db/database.js';
import { probeRequest } from '../src/verify/probes.js';
import { PROMPT_ALLOWANCE } from '../src/jobs/sql/complete.js';
import { COMPLETION_ALLOWANCE } from '../src/jobs/answer.js';
import { strikeFailures } from '../src/verify/failures.js';
import { DEFAULT_VERIFY } from '../src/config-verify.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { until } from './helpers/worker.js';

type WireJob = Job & { seed?: number; stream?: boolean; answer_prefix?: string };
const GRACE = 0.5;

describe.each(backends)('attempt owners on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let user: TestUser;
  let userKey: string;
  let nodes = 0;

  beforeAll(async () => {
    // Verification on (failure strikes and copies are its), with no probes and no random copies;
    // three node-owned failures make a strike. A job no node may take any more fails GRACE
    // seconds after its last attempt.
    t = await startApp(backend, {
      coordinator: { maxAttempts: 3, noNodeGrace: GRACE },
      verify: { enabled: true, probeInterval: 0, share: 0, failuresPerStrike: 3 },
    });
    userKey = await t.addUser();
    user = new TestUser(t.app, userKey);
  });
  afterAll(async () => {
    await t.close();
  });

  const q = <R>(name: string, text: string, values: unknown[] = []) => t.db.query<R>(sql(name, text), values);
  const worker = async (model: string, name = `owner-node-${++nodes}`) => new TestWorker(t.app, name, await t.addNode(name)).start([model]);
  const reportWith = (w: TestWorker, job: Job, content: string, status: 'success' | 'error', usage?: Record<string, number>) =>
    w.post('/worker/update_result', {
      job_id: job.job_id,
      api_key: job.api_key,
      model_name: job.model,
      result: { message: { role: 'assistant', content } },
      status,
      ...(usage ? { usage } : {}),
    });
  // What the owner has used once finished jobs are settled (the settler, src/usage/settle.ts, runs
  // on a timer in a server; a test settles by hand).
  const tokensUsed = async () => {
    await t.app.service.usage.settle();
    return (await t.app.inject({ method: 'GET', url: '/usage', headers: { api_key: userKey } })).json<{ used: { tokens: number } }>().used.tokens;
  };
  const strikes = async (node: string) =>
    (
      await q<{ kind: string }>(
        `t_strikes_${node}`,
        'SELECT s.kind FROM node_strikes s JOIN nodes n ON n.id = s.node_id WHERE n.name = $1 ORDER BY s.id',
        [node],
      )
    ).map((s) => s.kind);
  const stream = (jobId: string) => q('t_stream', 'UPDATE jobs SET request = request || \'{"stream": true}\' WHERE id = $1::uuid', [jobId]);
  /**
   * Jobs given 60 seconds reach their deadline leased, each lease taken `held` seconds ago: one
   * statement, so the server's own sweep sees the jobs and their leases moved together (moved
   * apart, a sweep in between saw a lease held 0 seconds and rightly copied nothing: a CI flake).
   */
  const reachDeadline = (...jobs: [id: string, held: number][]) =>
    q(
      't_reach_deadline',
      `WITH h AS (SELECT * FROM unnest($1::uuid[], $2::float8[]) AS h(id, held)),
      j AS (UPDATE jobs SET submitted_at = now() - interval '60 seconds', deadline_at = now() WHERE id IN (SELECT id FROM h))
      UPDATE job_leases l SET leased_at = now() - make_interval(secs => h.held), expires_at = now() FROM h WHERE l.job_id = h.id AND l.ended_at IS NULL`,
      [jobs.map(([id]) => id), jobs.map(([, held]) => held)],
    );
  /** The first job a worker gets, polling until one comes (a copy is queued off the request path). */
  const nextJob = async (w: TestWorker): Promise<WireJob> => {
    let job: WireJob | null = null;
    await until(`${w.node} to get a job`, async () => (job = await w.getJob()) !== null, 10_000);
    return job!;
  };

  it('one node with 4 sessions cannot fail jobs with error reports: an honest node answers every one, and the hostile node gets a strike', async () => {
    const model = 'hostile-model';
    const hostileKey = await t.addNode('hostile');
    const hostile: TestWorker[] = [];
    for (let i = 0; i < 4; i++) hostile.push(await new TestWorker(t.app, 'hostile', hostileKey).start([model]));
    const honest = await worker(model, 'honest');
    const ids = [];
    for (let i = 0; i < 6; i++) ids.push(await user.submit(model, `question ${i}`));
    const answeredBy = new Map<string, string>();
    // Each round the hostile sessions poll first and fail whatever they get; then the honest node answers one job.
    for (let round = 0; round < 20 && answeredBy.size < ids.length; round++) {
      for (const h of hostile) {
        const job = await h.getJob();
        if (job) expect((await reportWith(h, job, '', 'error')).statusCode).toBe(200);
      }
      const job = await honest.getJob();
      if (job) {
        expect((await honest.report(job)).statusCode).toBe(200);
        answeredBy.set(job.job_id, 'honest');
      }
    }
    expect([...answeredBy.keys()].sort()).toEqual([...ids].sort());
    for (const id of ids) expect((await user.result(id)).json()).toMatchObject({ status: 'success' });
    // A node never gets back a job it failed: each job's failures are distinct nodes'.
    const failed = await q<{ n: number }>(
      't_hostile_leases',
      `SELECT count(*)::int AS n FROM job_leases l JOIN nodes n ON n.id = l.node_id
      WHERE n.name = 'hostile' GROUP BY l.job_id HAVING count(*) > 1`,
    );
    expect(failed).toEqual([]);
    // Counted against the node (the verifier records it, off the request path).
    await expect.poll(() => strikes('hostile'), { timeout: 10_000 }).toContain('failure');
    expect(await strikes('honest')).toEqual([]);
  });

  it("failures of jobs no node could finish are the jobs' own: no failure strike; those another node finished are counted", async () => {
    // A user's prompts every backend refuses (past their context, say): both nodes fail each.
    const bad = [await worker('unrunnable', 'unrunnable-1'), await worker('unrunnable', 'unrunnable-2')];
    for (let i = 0; i < 4; i++) await user.submit('unrunnable', `a prompt no backend can run ${i}`);
    for (let round = 0; round < 8; round++) {
      for (const w of bad) {
        const job = await w.getJob();
        if (job) expect((await reportWith(w, job, '', 'error')).statusCode).toBe(200);
      }
    }
    expect(
      await q(
        't_unrunnable',
        "SELECT count(*)::int AS n FROM job_leases l JOIN nodes n ON n.id = l.node_id WHERE n.name LIKE 'unrunnable-%' AND l.outcome = 'error'",
      ),
    ).toEqual([{ n: 8 }]);
    // A node whose failed jobs another node finishes: its third such failure is a strike. The
    // failures are judged one after another, so once it is struck the ones above were judged.
    const flaky = await worker('flaky-model', 'flaky');
    const steady = await worker('flaky-model', 'steady');
    for (let i = 0; i < 3; i++) {
      const id = await user.submit('flaky-model', `job ${i}`);
      const job = (await flaky.getJob())!;
      expect(job.job_id).toBe(id);
      expect((await reportWith(flaky, job, '', 'error')).statusCode).toBe(200);
      const again = (await steady.getJob())!;
      expect((await steady.report(again)).statusCode).toBe(200);
    }
    await expect.poll(() => strikes('flaky'), { timeout: 10_000 }).toEqual(['failure']);
    expect(await strikes('unrunnable-1')).toEqual([]);
    expect(await strikes('unrunnable-2')).toEqual([]);
    expect(await strikes('steady')).toEqual([]);
  });

  it('three colluding nodes that fail every job with error reports: each failed job is copied to the honest node, which answers it, and each colluder gets a failure strike', async () => {
    const model = 'collusion-model';
    const colluders = [await worker(model, 'colluder-1'), await worker(model, 'colluder-2'), await worker(model, 'colluder-3')];
    const honest = await worker(model, 'collusion-honest');
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push(await user.submit(model, `collude on ${i}`));
    // The colluders poll first and fail whatever they get, until none is left for them: each job
    // takes all three, its MAX_ATTEMPTS, and fails with the honest node online.
    for (let round = 0; round < 6; round++) {
      for (const c of colluders) {
        for (let job = await c.getJob(); job; job = await c.getJob()) expect((await reportWith(c, job, '', 'error')).statusCode).toBe(200);
      }
    }
    for (const id of ids) expect((await user.result(id)).json()).toMatchObject({ status: 'failed' });
    // Each failed job is copied, off the request path, to the node that held no lease of it.
    const copies = new Set<string>();
    while (copies.size < ids.length) {
      const job = await nextJob(honest);
      expect(ids).not.toContain(job.job_id);
      expect((await honest.report(job)).statusCode).toBe(200);
      copies.add(job.job_id);
    }
    expect(
      await q<{ of: string }>('t_collusion_copies', 'SELECT verify_of::text AS of FROM jobs WHERE id = ANY($1::uuid[]) ORDER BY verify_of', [
        [...copies],
      ]),
    ).toEqual([...ids].sort().map((of) => ({ of })));
    // Answered by another node: the three error reports of each colluder count, a strike each.
    for (const c of colluders) await expect.poll(() => strikes(c.node), { timeout: 10_000 }).toEqual(['failure']);
    expect(await strikes('collusion-honest')).toEqual([]);
    // The users' jobs stay as they ended: their answer was given.
    for (const id of ids) expect((await user.result(id)).json()).toMatchObject({ status: 'failed' });
  });

  it('error reports already counted for a strike do not count again when checks of their done jobs are answered later', async () => {
    const model = 'double-model';
    const x = await worker(model, 'double-x');
    const y = await worker(model, 'double-y');
    const z = await worker(model, 'double-z');
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const id = await user.submit(model, `double ${i}`);
      ids.push(id);
      const job = (await x.getJob())!;
      expect(job.job_id).toBe(id);
      expect((await reportWith(x, job, '', 'error')).statusCode).toBe(200);
      const again = (await y.getJob())!;
      expect(again.job_id).toBe(id);
      expect((await y.report(again)).statusCode).toBe(200);
    }
    await expect.poll(() => strikes('double-x'), { timeout: 10_000 }).toEqual(['failure']);
    // Checks of the done jobs (a share, probation), answered by another node afterwards.
    const nodeId = async (name: string) =>
      (await q<{ id: number }>(`t_node_${name}`, 'SELECT id::int AS id FROM nodes WHERE name = $1', [name]))[0]!.id;
    const [xi, yi] = [await nodeId('double-x'), await nodeId('double-y')];
    const lifecycle = t.app.service.coordinator.lifecycle;
    lifecycle.apply(
      await t.db.transaction((tx) =>
        lifecycle.queueChecks(
          tx,
          ids.map((of) => ({ kind: 'verify' as const, id: randomUUID(), of, exclude: [yi, xi], suspicion: null })),
          240,
        ),
      ),
    );
    for (let i = 0; i < 3; i++) expect((await z.report(await nextJob(z))).statusCode).toBe(200);
    // No new failure of X: judged again, its three error reports make no second strike.
    expect((await strikeFailures(t.db, [{ nodeId: xi, jobId: ids[2]! }], { ...DEFAULT_VERIFY, failuresPerStrike: 3 })).strikes).toEqual([]);
  });

  it('a node that holds its jobs until their deadline: each expired job is copied to another node, and done within half the time its owner gave it, it counts against the node', async () => {
    const model = 'deadline-model';
    const holder = await worker(model, 'deadline-holder');
    const other = await worker(model, 'deadline-other');
    for (let i = 0; i < 3; i++) {
      const id = await user.submit(model, `hold me ${i}`);
      expect((await holder.getJob())!.job_id).toBe(id);
      // The holder never reports: the job's deadline passes with it leased (here: a job given 60
      // seconds, submitted and leased 60 seconds ago), and a sweep expires it.
      await reachDeadline([id, 60]);
      await until(
        'the job to expire',
        async () => {
          await t.app.service.coordinator.lifecycle.sweep();
          return (await q<{ state: string }>('t_expired', 'SELECT state FROM jobs WHERE id = $1::uuid', [id]))[0]!.state === 'expired';
        },
        10_000,
      );
      expect(await q('t_deadline_outcome', 'SELECT outcome FROM job_leases WHERE job_id = $1::uuid', [id])).toEqual([{ outcome: 'deadline' }]);
      const copy = await nextJob(other);
      expect(await q('t_deadline_copy', 'SELECT verify_of::text AS of FROM jobs WHERE id = $1::uuid', [copy.job_id])).toEqual([{ of: id }]);
      expect((await other.report(copy)).statusCode).toBe(200);
    }
    await expect.poll(() => strikes('deadline-holder'), { timeout: 10_000 }).toEqual(['failure']);
    expect(await strikes('deadline-other')).toEqual([]);
  });

  it('a job held until its deadline whose copy took over half the time its owner gave it, and one taken late: no failure counted, no copy of the late one', async () => {
    const model = 'slow-deadline-model';
    // The slow node runs two sessions (a session holds one job at a time).
    const slowKey = await t.addNode('slow-holder');
    const slow = [
      await new TestWorker(t.app, 'slow-holder', slowKey).start([model]),
      await new TestWorker(t.app, 'slow-holder', slowKey).start([model]),
    ];
    const other = await worker(model, 'slow-other');
    const id = await user.submit(model, 'a long answer');
    const late = await user.submit(model, 'taken late');
    expect(new Set([(await slow[0]!.getJob())!.job_id, (await slow[1]!.getJob())!.job_id])).toEqual(new Set([id, late]));
    // Both were given 60 seconds and reach their deadline leased: the first was held for all of
    // them, the second taken 10 seconds before its deadline (it waited in the queue).
    await reachDeadline([id, 60], [late, 10]);
    await until(
      'the jobs to expire',
      async () => {
        await t.app.service.coordinator.lifecycle.sweep();
        return (
          (
            await q<{ n: number }>('t_slow_expired', "SELECT count(*)::int AS n FROM jobs WHERE id = ANY($1::uuid[]) AND state = 'expired'", [
              [id, late],
            ])
          )[0]!.n === 2
        );
      },
      10_000,
    );
    const copy = await nextJob(other);
    expect(await q('t_slow_copy_of', 'SELECT verify_of::text AS of FROM jobs WHERE id = $1::uuid', [copy.job_id])).toEqual([{ of: id }]);
    // The job taken late is not copied (decided with the other, in one sweep's audit): a lease
    // shorter than half the job's time is no node's fault.
    expect(await q('t_late_copies', 'SELECT count(*)::int AS n FROM jobs WHERE verify_of = $1::uuid', [late])).toEqual([{ n: 0 }]);
    // The copy took 31 seconds of the 60 the job had: the slow node is not judged by it.
    await q('t_slow_copy', "UPDATE jobs SET submitted_at = now() - interval '31 seconds' WHERE id = $1::uuid", [copy.job_id]);
    expect((await other.report(copy)).statusCode).toBe(200);
    const counted = sql(
      't_slow_counted',
      `SELECT count(*)::int AS n FROM job_leases l WHERE l.job_id = $1::uuid AND l.outcome = 'deadline'
      AND EXISTS (SELECT 1 FROM jobs c WHERE c.verify_of = l.job_id AND c.state = 'done')`,
    );
    await expect.poll(async () => (await t.db.query<{ n: number }>(counted, [id]))[0]!.n, { timeout: 10_000 }).toBe(1);
    // Judged at one failure a strike, had the lease counted: none.
    const [{ id: nodeId }] = (await q<{ id: number }>('t_slow_node', "SELECT id FROM nodes WHERE name = 'slow-holder'")) as [{ id: number }];
    expect((await strikeFailures(t.db, [{ nodeId, jobId: id }], { ...DEFAULT_VERIFY, failuresPerStrike: 1 })).strikes).toEqual([]);
    expect(await strikes('slow-holder')).toEqual([]);
  });

  it('a job no node that may take it remains for fails after NO_NODE_GRACE, and /v1 answers 502 job_failed', async () => {
    const model = 'lonely-model';
    const tools = async (w: TestWorker, caps: string[]) =>
      expect((await w.post('/worker/update_models', { node_url: w.node, models: [model], capabilities: { [model]: caps } }, true)).statusCode).toBe(
        200,
      );
    // The job needs tools. Online for its model besides the node that fails it: a node that may
    // not take it (suspended), and one that cannot (it declared no tools).
    const w = await worker(model);
    await tools(w, ['tools']);
    await tools(await worker(model, 'lonely-suspended'), ['tools']);
    await q('t_suspend', "INSERT INTO node_standing (node_id, state) SELECT id, 'suspended' FROM nodes WHERE name = 'lonely-suspended'");
    await worker(model, 'lonely-plain');
    const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } };
    const completion = t.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${userKey}` },
      payload: { model, messages: [{ role: 'user', content: 'only one node can serve me' }], tools: [tool] },
    });
    const job = await nextJob(w);
    expect((await reportWith(w, job, '', 'error')).statusCode).toBe(200);
    // The node that failed it never gets it back.
    expect(await w.getJob()).toBeNull();
    const res = await completion;
    expect(res.statusCode).toBe(502);
    expect(res.json()).toMatchObject({
      error: { type: 'server_error', code: 'job_failed', message: 'No node could finish the job: no node that may take it remains.' },
    });
    expect(await q('t_lonely', 'SELECT state, failures, detail FROM jobs WHERE id = $1::uuid', [job.job_id])).toEqual([
      { state: 'failed', failures: 1, detail: 'no node that may take it remains' },
    ]);
  });

  it("a user's job whose lease ran out goes back to its node when no other may take it: a worker killed mid-job and started again finishes it", async () => {
    const model = 'restarted-model';
    const key = await t.addNode('restarted');
    const first = await new TestWorker(t.app, 'restarted', key).start([model]);
    const id = await user.submit(model, 'only one node serves me');
    expect((await first.getJob())!.job_id).toBe(id);
    // The worker is killed: it never reports, and its lease runs out (here: ended by hand, then swept).
    await q('t_run_out', 'UPDATE job_leases SET expires_at = now() WHERE job_id = $1::uuid AND ended_at IS NULL', [id]);
    await until(
      'the lease to be swept',
      async () =>
        (await t.app.service.coordinator.lifecycle.sweep()) !== undefined &&
        (await q<{ state: string }>('t_requeued', 'SELECT state FROM jobs WHERE id = $1::uuid', [id]))[0]!.state === 'queued',
      10_000,
    );
    const again = await new TestWorker(t.app, 'restarted', key).start([model]);
    // Past the grace, a sweep gives it back to the node rather than failing it.
    await until(
      'the job to be given back',
      async () => {
        await t.app.service.coordinator.lifecycle.sweep();
        return (await q<{ n: number }>('t_readmitted', 'SELECT cardinality(exclude_nodes) AS n FROM jobs WHERE id = $1::uuid', [id]))[0]!.n === 0;
      },
      10_000,
    );
    const job = await nextJob(again);
    expect(job.job_id).toBe(id);
    expect((await again.report(job)).statusCode).toBe(200);
    expect((await user.result(id)).json()).toMatchObject({ status: 'success' });
    expect(await q('t_restarted', 'SELECT state, failures FROM jobs WHERE id = $1::uuid', [id])).toEqual([{ state: 'done', failures: 1 }]);
    // Each lapse still counts against the node (a lease that ran out is no user's doing): two
    // more make three, a failure strike.
    for (let i = 0; i < 2; i++) {
      await user.submit(model, `lapse ${i}`);
      // Whichever job comes (the one lapsed before may be back already): its lease runs out too.
      const leased = (await nextJob(again)).job_id;
      await q('t_run_out', 'UPDATE job_leases SET expires_at = now() WHERE job_id = $1::uuid AND ended_at IS NULL', [leased]);
      await until(
        'the lease to be swept',
        async () =>
          (await t.app.service.coordinator.lifecycle.sweep()) !== undefined &&
          (
            await q<{ n: number }>(
              't_lapsed',
              "SELECT count(*)::int AS n FROM job_leases l JOIN nodes n ON n.id = l.node_id WHERE n.name = 'restarted' AND l.outcome = 'expired'",
            )
          )[0]!.n ===
            i + 2,
        10_000,
      );
    }
    await expect.poll(() => strikes('restarted'), { timeout: 10_000 }).toEqual(['failure']);
  });

  it('a job another node that may take it is online for is not failed: that node leases it', async () => {
    const model = 'shared-model';
    const first = await worker(model);
    const other = await worker(model);
    const id = await user.submit(model, 'two nodes serve me');
    const job = (await first.getJob())!;
    expect((await reportWith(first, job, '', 'error')).statusCode).toBe(200);
    // Past the grace since the failed attempt, a whole sweep of this server's: the job is still queued.
    await until(
      'the grace to pass',
      async () =>
        (
          await q<{ past: boolean }>(
            't_grace',
            `SELECT max(ended_at) < now() - make_interval(secs => ${GRACE}) AS past FROM job_leases WHERE job_id = $1::uuid`,
            [id],
          )
        )[0]!.past,
      10_000,
    );
    await until('a sweep of this server', () => t.app.service.coordinator.lifecycle.sweep(), 10_000);
    expect(await q('t_shared', 'SELECT state, failures FROM jobs WHERE id = $1::uuid', [id])).toEqual([{ state: 'queued', failures: 1 }]);
    const again = (await other.getJob())!;
    expect(again.job_id).toBe(id);
    expect((await other.report(again)).statusCode).toBe(200);
    expect((await user.result(id)).json()).toMatchObject({ status: 'success' });
  });

  it("an error report's usage is not charged: the owner pays the finishing attempt's tokens", async () => {
    const liar = await worker('usage-model');
    const honest = await worker('usage-model');
    const before = await tokensUsed();
    const id = await user.submit('usage-model', 'count me', { max_output: 100 });
    const first = (await liar.getJob())!;
    expect((await reportWith(liar, first, '', 'error', { prompt_tokens: 1, completion_tokens: 2_147_483_647 })).statusCode).toBe(200);
    const second = (await honest.getJob())!;
    expect(second.job_id).toBe(id);
    expect((await reportWith(honest, second, 'hi', 'success', { prompt_tokens: 3, completion_tokens: 5 })).statusCode).toBe(200);
    expect((await user.result(id)).json()).toMatchObject({ status: 'success', usage: { prompt_tokens: 3, completion_tokens: 5 } });
    expect(await tokensUsed()).toBe(before + 5);
  });

  it("a success report's prompt_tokens is capped at what its request could hold", async () => {
    const w = await worker('prompt-model');
    const id = await user.submit('prompt-model', 'Say hi', { max_output: 16 });
    const job = (await w.getJob())!;
    expect((await reportWith(w, job, 'Hi', 'success', { prompt_tokens: 2_000_000_000, completion_tokens: 2 })).statusCode).toBe(200);
    const [{ bytes }] = (await q<{ bytes: number }>('t_request_bytes', 'SELECT octet_length(request::text) AS bytes FROM jobs WHERE id = $1::uuid', [
      id,
    ])) as [{ bytes: number }];
    expect((await user.result(id)).json()).toMatchObject({
      status: 'success',
      usage: { prompt_tokens: bytes + PROMPT_ALLOWANCE, completion_tokens: 2 },
    });
    expect(bytes + PROMPT_ALLOWANCE).toBeLessThan(5_000);
  });

  it("a success report's usage is capped at the job's max_output, and at the reserve for a job that set none", async () => {
    const w = await worker('cap-model');
    const before = await tokensUsed();
    const capped = await user.submit('cap-model', 'say hi', { max_output: 16 });
    const a = (await w.getJob())!;
    // Answers long enough that the byte cap (the next test) does not bind first.
    const long = 'hi '.repeat(2_000);
    expect((await reportWith(w, a, long, 'success', { completion_tokens: 1_000_000_000 })).statusCode).toBe(200);
    expect((await user.result(capped)).json()).toMatchObject({ status: 'success', usage: { completion_tokens: 16 } });
    expect(await tokensUsed()).toBe(before + 16);
    // No max_output: the job reserved QUOTA_RESERVE_TOKENS (1024), and that is the most it is charged.
    const open = await user.submit('cap-model', 'say more', { max_output: 0 });
    const b = (await w.getJob())!;
    expect((await reportWith(w, b, long, 'success', { completion_tokens: 5_000 })).statusCode).toBe(200);
    expect((await user.result(open)).json()).toMatchObject({ status: 'success', usage: { completion_tokens: 1024 } });
    expect(await tokensUsed()).toBe(before + 16 + 1024);
    // What /v1 reads is the same number (the job's usage).
    expect(await q('t_usage', 'SELECT usage FROM jobs WHERE id = $1::uuid', [open])).toEqual([{ usage: { completion_tokens: 1024 } }]);
  });

  it("a success report's completion_tokens is capped at its answer's bytes and COMPLETION_ALLOWANCE", async () => {
    const w = await worker('bytes-model');
    const before = await tokensUsed();
    // An outside probe's node wrote 8 tokens and counted max_output: its user paid for 256.
    const short = await user.submit('bytes-model', 'write a lot', { max_output: 256 });
    const a = (await w.getJob())!;
    expect((await reportWith(w, a, 'héllo', 'success', { prompt_tokens: 3, completion_tokens: 256 })).statusCode).toBe(200);
    // 'héllo' is 6 UTF-8 bytes.
    expect((await user.result(short)).json()).toMatchObject({
      status: 'success',
      usage: { prompt_tokens: 3, completion_tokens: 6 + COMPLETION_ALLOWANCE },
    });
    expect(await tokensUsed()).toBe(before + 6 + COMPLETION_ALLOWANCE);
    // Its count reached max_output: the answer says it stopped there ("length", what /v1 inferred
    // from the count before it was cut), and the lease keeps the count as reported, for verification.
    expect(
      await q(
        't_cut',
        `SELECT j.result -> 'finish_reason' AS finish, l.usage -> 'completion_tokens' AS reported
      FROM jobs j JOIN job_leases l ON l.job_id = j.id WHERE j.id = $1::uuid`,
        [short],
      ),
    ).toEqual([{ finish: 'length', reported: 256 }]);
    // A count within the bytes stands as the node said.
    const honest = await user.submit('bytes-model', 'write a little', { max_output: 256 });
    const b = (await w.getJob())!;
    expect((await reportWith(w, b, 'a fair answer of some words', 'success', { completion_tokens: 7 })).statusCode).toBe(200);
    expect((await user.result(honest)).json()).toMatchObject({ status: 'success', usage: { completion_tokens: 7 } });
    expect(await tokensUsed()).toBe(before + 6 + COMPLETION_ALLOWANCE + 7);
    expect(await q('t_not_cut', "SELECT result ? 'finish_reason' AS finish FROM jobs WHERE id = $1::uuid", [honest])).toEqual([{ finish: false }]);
    // Each tool call has its own allowance (a template's marks around it).
    const calls = await user.submit('bytes-model', 'call tools', { max_output: 256 });
    const c = (await w.getJob())!;
    const call = (id: string) => ({ id, type: 'function', function: { name: 'f', arguments: '{}' } });
    expect(
      (
        await w.post('/worker/update_result', {
          job_id: c.job_id,
          api_key: c.api_key,
          model_name: c.model,
          status: 'success',
          result: { message: { role: 'assistant', content: '', tool_calls: [call('a'), call('b')] } },
          usage: { completion_tokens: 200 },
        })
      ).statusCode,
    ).toBe(200);
    expect((await user.result(calls)).json()).toMatchObject({ status: 'success', usage: { completion_tokens: 2 * 3 + 3 * COMPLETION_ALLOWANCE } });
  });

  it('a continued job is copied to a node that held no lease of it, and the continuer is judged', async () => {
    const model = 'continue-model';
    const starter = await worker(model, 'starter');
    const continuer = await worker(model, 'continuer');
    const checkers = [await worker(model, 'checker-1'), await worker(model, 'checker-2')];
    // The continuer is on probation: every temperature-0 job of it is copied.
    await q('t_probation', "INSERT INTO node_standing (node_id, state) SELECT id, 'probation' FROM nodes WHERE name = 'continuer'");
    const id = await user.submit(model, 'What is the capital of France?', { temperature: 0 });
    await stream(id);
    const a = (await starter.getJob())!;
    expect((await starter.post('/worker/job_progress', { job_id: id, api_key: a.api_key, delta: 'x' })).statusCode).toBe(200);
    expect((await reportWith(starter, a, '', 'error')).statusCode).toBe(200);
    // The node that failed it does not get it back (the attack continued its own prefix).
    expect(await starter.getJob()).toBeNull();
    const b: WireJob = (await continuer.getJob())!;
    expect(b.answer_prefix).toBe('x');
    expect((await reportWith(continuer, b, 'x garbage garbage garbage', 'success')).statusCode).toBe(200);
    // Copied: to a node that held no lease of it (neither the starter nor the continuer).
    const copy = await nextJob(checkers[0]!);
    const [made] = await q<{ verify_of: string; exclude: number[] }>(
      't_copy',
      'SELECT verify_of::text, exclude_nodes::int[] AS exclude FROM jobs WHERE id = $1::uuid',
      [copy.job_id],
    );
    const [ids] = await q<{ starter: number; continuer: number }>(
      't_ids',
      "SELECT (SELECT id::int FROM nodes WHERE name = 'starter') AS starter, (SELECT id::int FROM nodes WHERE name = 'continuer') AS continuer",
    );
    expect(made!.verify_of).toBe(id);
    expect([...made!.exclude].sort()).toEqual([ids!.starter, ids!.continuer].sort());
    expect((await reportWith(checkers[0]!, copy, 'The capital of France is Paris.', 'success')).statusCode).toBe(200);
    // They disagree: a third node decides, and the majority contradicts the continuer.
    const third = await nextJob(checkers[1]!);
    expect((await reportWith(checkers[1]!, third, 'The capital of France is Paris.', 'success')).statusCode).toBe(200);
    await expect.poll(() => strikes('continuer'), { timeout: 10_000 }).toEqual(['disagreement']);
    expect(await strikes('checker-1')).toEqual([]);
  });

  it("copies and probes look like users' jobs on the worker wire: the same fields, streamed as users' are", async () => {
    const model = 'wire-model';
    const runner = await worker(model, 'wire-runner');
    const checker = await worker(model, 'wire-checker');
    await q('t_probation2', "INSERT INTO node_standing (node_id, state) SELECT id, 'probation' FROM nodes WHERE name = 'wire-runner'");
    const id = await user.submit(model, 'Name three colours.', { temperature: 0, max_output: 64 });
    await stream(id);
    const original: WireJob = (await runner.getJob())!;
    expect(original.stream).toBe(true);
    expect((await runner.report(original, 'red, green, blue')).statusCode).toBe(200);
    const copy = await nextJob(checker);
    expect(Object.keys(copy).sort()).toEqual(Object.keys(original).sort());
    expect(copy).toMatchObject({ stream: true, messages: original.messages, max_output: 64, temperature: 0, seed: original.seed });
    expect((await checker.report(copy, 'red, green, blue')).statusCode).toBe(200);
    // Probes: a share streams (as users' jobs through /v1 do); a streamed one has a streamed user job's fields.
    const requests = Array.from({ length: 400 }, () => probeRequest());
    const streamed = requests.filter((r) => r.stream).length;
    expect(streamed).toBeGreaterThan(100);
    expect(streamed).toBeLessThan(300);
    const [{ id: modelId }] = (await q<{ id: number }>('t_model', 'SELECT id FROM models WHERE name = $1', [model])) as [{ id: number }];
    const lifecycle = t.app.service.coordinator.lifecycle;
    lifecycle.apply(await lifecycle.queueChecks(t.db, [{ kind: 'probe', id: randomUUID(), modelId, request: requests.find((r) => r.stream)! }], 60));
    const probe = await nextJob(runner);
    expect(Object.keys(probe).sort()).toEqual(Object.keys(original).sort());
    expect(probe.stream).toBe(true);
  });
});
