// Verification through the real app on both backends (workers speak the wire with inject):
// the majority's verdict, replays (checked by another node, or alone), speed, stock answers,
// what a suspended node can no longer do and its reinstatement, probes that look like any
// job, and reversals that leave every aggregate equal to its recomputation, exactly once.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { runCommand } from '../src/cli/commands.js';
import { bufferIo } from '../src/cli/io.js';
import { DEFAULT_VERIFY, type VerifyConfig } from '../src/config-verify.js';
import { auditBatch } from '../src/verify/auditor.js';
import { reverse } from '../src/verify/reversal.js';
import { strikeNode } from '../src/nodes/sql/standing.js';
import { backends } from './helpers/db.js';
import { auditWaits, copiesCounted, ownRound, ownRoundApplied } from './helpers/audits.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { recordResult } from './helpers/production-paths.js';
import { totalPoints } from './helpers/state.js';
import { canned, prose } from './helpers/behaviours.js';

const MODEL = 'verify-model';
// Workers here answer at once: speed is judged only where a test sets a cap.
const VERIFY: Partial<VerifyConfig> = { enabled: true, share: 0, probeInterval: 0, maxTokensPerSecond: 0 };

describe.each(backends)('verification on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  const start = async (verify: Partial<VerifyConfig>, nodes: string[], models = [MODEL]) => {
    t = await startApp(backend, { verify: { ...VERIFY, ...verify } });
    const user = new TestUser(t.app, await t.addUser());
    const workers = new Map<string, TestWorker>();
    const keys = new Map<string, string>();
    for (const n of nodes) {
      keys.set(n, await t.addNode(n));
      workers.set(n, await new TestWorker(t.app, n, keys.get(n)!).start(models));
    }
    return { user, workers, keys };
  };
  // A wait that times out says which jobs and standings it was looking at.
  const { q, settled, until, standing, pointsOf } = auditWaits(() => t.db, {
    timeoutMs: 15_000,
    detail: async () =>
      `${JSON.stringify(await q('t_dbg', "SELECT kind, state, EXISTS (SELECT 1 FROM job_audits a WHERE a.job_id = jobs.id) AS unaudited, attempts, exclude_nodes::text, node_id::int, (SELECT count(*)::int FROM job_leases l WHERE l.job_id = jobs.id) AS leases FROM jobs WHERE state IN ('queued','leased') OR id IN (SELECT job_id FROM job_audits)"))} ${JSON.stringify(await q('t_dbg2', 'SELECT node_id::int, state FROM node_standing'))}`,
  });
  const strikes = async (node: string) =>
    q<{ kind: string }>('t_strikes', 'SELECT k.kind FROM node_strikes k JOIN nodes n ON n.id = k.node_id WHERE n.name = $1::text ORDER BY k.id', [
      node,
    ]);
  /** Every worker polls once and answers what it got, until `done` (or every job is settled). */
  const serve = async (workers: Map<string, TestWorker>, answer: (node: string, job: Job) => string, done = settled) => {
    await until(
      'the jobs to settle',
      async () => {
        for (const [name, w] of workers) {
          const job = await w.getJob();
          if (job) expect((await w.report(job, answer(name, job))).statusCode).toBe(200);
        }
        return done();
      },
      30_000,
    );
  };
  const prompt = (job: Job) => job.messages.at(-1)!.content;

  it('strikes the node the majority contradicts, suspends it, and takes back exactly its points', async () => {
    const { user, workers } = await start({ share: 1 }, ['honest-1', 'honest-2', 'wrong']);
    for (let i = 0; i < 12; i++) await user.submit(MODEL, `question ${i}: why is the sky blue?`, { temperature: 0 });
    // "wrong" runs another model than it claims: its answers are its own, never a copy.
    await serve(workers, (node, job) => prose(node === 'wrong' ? 'tiny-model' : MODEL, prompt(job)));
    expect(await standing('wrong')).toBe('suspended');
    // GET /total_job_count counts the 12 jobs submitted, not the copies made to check them.
    const [copies] = await q<{ n: number }>('t_copies', "SELECT count(*)::int AS n FROM jobs WHERE kind <> 'user'");
    expect(copies!.n).toBeGreaterThan(0);
    expect((await t.app.inject({ method: 'GET', url: '/total_job_count' })).json()).toMatchObject({ total_job_count: 12 });
    // Three suspend it; judgements of its earlier answers may still add some.
    const kinds = (await strikes('wrong')).map((s) => s.kind);
    expect(kinds.length).toBeGreaterThanOrEqual(3);
    expect(new Set(kinds)).toEqual(new Set(['disagreement']));
    expect(await standing('honest-1')).toBe('trusted');
    expect(await standing('honest-2')).toBe('trusted');
    expect(await strikes('honest-1')).toEqual([]);
    expect(await pointsOf('wrong')).toBe(0);
    const [ledger] = await q<{ n: number }>(
      't_ledger',
      'SELECT count(*)::int AS n FROM point_reversals r JOIN nodes n ON n.id = r.node_id WHERE n.name = $1::text',
      ['wrong'],
    );
    expect(ledger!.n).toBeGreaterThan(0);
    // Points are exactly the successes left: every job done once, the reversed ones nowhere.
    const [done] = await q<{ n: number }>('t_done', "SELECT count(*)::int AS n FROM job_results WHERE status = 'success'");
    expect(await totalPoints(t.db)).toBe(done!.n);
    const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
    expect(stored).toEqual(recomputed);
    // The node sees it too.
    const res = await t.app.inject({ method: 'GET', url: '/network/nodes/wrong', headers: { api_key: await t.addReader() } });
    expect(res.json()).toMatchObject({ standing: 'suspended', strikes_counting: kinds.length, points_reversed: ledger!.n });
    // Each of its last leases whose points were taken back says why (an outside probe saw them as plain `done`).
    const [reversedLeases] = await q<{ n: number }>(
      't_reversed_leases',
      `SELECT count(*)::int AS n FROM (SELECT l.job_id FROM job_leases l JOIN nodes n ON n.id = l.node_id
      WHERE n.name = 'wrong' ORDER BY l.leased_at DESC LIMIT 20) l JOIN point_reversals r ON r.job_id = l.job_id::text`,
    );
    const jobs = res.json().jobs as { outcome: string | null; reversed: string | null }[];
    expect(jobs.filter((j) => j.reversed !== null)).toHaveLength(reversedLeases!.n);
    expect(reversedLeases!.n).toBeGreaterThan(0);
    expect(jobs.every((j) => j.reversed === null || (j.outcome === 'done' && ['strike', 'suspended'].includes(j.reversed)))).toBe(true);
    const honest = await t.app.inject({ method: 'GET', url: '/network/nodes/honest-1', headers: { api_key: await t.addReader() } });
    expect((honest.json().jobs as { reversed: string | null }[]).every((j) => j.reversed === null)).toBe(true);
  });

  it('checks a replayed answer with another node, and strikes it when that node disagrees', async () => {
    const { user, workers } = await start({}, ['honest', 'replayer']);
    const only = (name: string) => new Map([[name, workers.get(name)!]]);
    await user.submit(MODEL, 'tell me about rivers', { temperature: 0.8 });
    await serve(only('replayer'), (_n, job) => prose(MODEL, prompt(job)));
    const first = prose(MODEL, 'tell me about rivers');
    await user.submit(MODEL, 'tell me about glaciers', { temperature: 0.8 });
    // The same answer to another prompt, its whitespace jittered.
    await serve(
      only('replayer'),
      () => first.replaceAll(' ', '  \n '),
      async () => (await q<{ n: number }>('t_copies', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'verify'"))[0]!.n === 1,
    );
    await serve(only('honest'), (_n, job) => prose(MODEL, prompt(job)));
    expect(await strikes('replayer')).toEqual([{ kind: 'replay' }]);
    expect(await standing('replayer')).toBe('probation');
    expect(await strikes('honest')).toEqual([]);
  });

  it("a suspected replay that one node contradicts goes to a third node: agreeing with the original, the contradicting node is struck, not the original's", async () => {
    const { user, workers } = await start({}, ['repeater', 'colluder', 'third']);
    const only = (name: string) => new Map([[name, workers.get(name)!]]);
    const copies = (n: number) => async () =>
      (await q<{ n: number }>('t_copies', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'verify'"))[0]!.n === n;
    // A user makes an honest node give one text to two prompts (the second asks for it again).
    await user.submit(MODEL, 'tell me about rivers', { temperature: 0.8 });
    await serve(only('repeater'), (_n, job) => prose(MODEL, prompt(job)));
    const first = prose(MODEL, 'tell me about rivers');
    await user.submit(MODEL, `repeat this: ${first}`, { temperature: 0.8 });
    await serve(only('repeater'), () => first, copies(1));
    // A node working with that user answers the copy wrong; a third copy is asked for.
    await serve(only('colluder'), (_n, job) => prose('tiny-model', prompt(job)), copies(2));
    expect(await strikes('repeater')).toEqual([]);
    // The third node gives the text the prompt asked for: the colluder is the odd one.
    await serve(only('third'), () => first);
    expect(await strikes('colluder')).toEqual([{ kind: 'disagreement' }]);
    expect(await strikes('repeater')).toEqual([]);
    expect(await strikes('third')).toEqual([]);
  });

  it("a copy answered with a replay, contradicted by a third node, is a replay strike on the copy's node", async () => {
    const { user, workers } = await start({ share: 1 }, ['honest-1', 'honest-2', 'replayer']);
    const only = (name: string) => new Map([[name, workers.get(name)!]]);
    const copies = (n: number) => async () =>
      (await q<{ n: number }>('t_copies', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'verify'"))[0]!.n === n;
    // The replayer's first answer, honest (sampled, not temperature 0: no copy of it).
    await user.submit(MODEL, 'tell me about rivers', { temperature: 0.8 });
    await serve(only('replayer'), (_n, job) => prose(MODEL, prompt(job)));
    const first = prose(MODEL, 'tell me about rivers');
    // An honest node's job, copied (share 1); the copy reaches the replayer, which replays.
    await user.submit(MODEL, 'tell me about glaciers', { temperature: 0 });
    await serve(only('honest-1'), (_n, job) => prose(MODEL, prompt(job)), copies(1));
    await serve(only('replayer'), () => first.replaceAll(' ', '  \n '), copies(2));
    // The third node agrees with the original.
    await serve(only('honest-2'), (_n, job) => prose(MODEL, prompt(job)));
    const [struck] = await q<{ kind: string; evidence: Record<string, unknown> }>(
      't_replay',
      `SELECT k.kind, k.evidence FROM node_strikes k JOIN nodes n ON n.id = k.node_id
      WHERE n.name = 'replayer'`,
    );
    expect(struck).toMatchObject({ kind: 'replay', evidence: { exact: true } });
    expect(await strikes('replayer')).toHaveLength(1);
    expect(await strikes('honest-1')).toEqual([]);
    expect(await strikes('honest-2')).toEqual([]);
  });

  it('leaves a replay no other node can check unstruck, and stock answers alone', async () => {
    // The one node of a model gives one answer to different prompts: a replay, or an honest
    // model asked for the same text ("repeat this sentence"). Nobody can tell which; a user
    // could otherwise get the node suspended (two outside probes did).
    const { user, workers } = await start({}, ['alone']);
    for (let i = 0; i < 4; i++) await user.submit(MODEL, `prompt number ${i}`);
    await serve(workers, () => canned(MODEL, []));
    await vi.waitFor(
      async () => expect(await t.app.metrics.registry.getSingleMetricAsString('ins_verification_total')).toMatch(/event="replay_unchecked"} 3\b/),
      { timeout: 20_000, interval: 20 },
    );
    expect(await strikes('alone')).toEqual([]);
    expect(await standing('alone')).toBe('trusted');
    expect(await pointsOf('alone')).toBe(4);
    await t.close();

    // Two nodes giving the same refusal to different prompts: a stock answer, not a replay.
    const two = await start({}, ['polite-1', 'polite-2']);
    const refusal = "I'm sorry, but I can't help with that request. Is there anything else I can help you with today?";
    for (let i = 0; i < 6; i++) await two.user.submit(MODEL, `something I should not ask, take ${i}`, { temperature: 0 });
    await serve(two.workers, () => refusal);
    expect(await strikes('polite-1')).toEqual([]);
    expect(await strikes('polite-2')).toEqual([]);
  });

  it('strikes an answer delivered faster than the model can generate, and takes that job back', async () => {
    // fast-model's cap is above any rate a lease can show: the auditor counts a lease as 1 ms at
    // least (rules.ts tooFast), and this answer's ~212 tokens in under 2 ms beat 100,000/s.
    const { user, workers } = await start(
      { maxTokensPerSecond: 200, modelMaxTokensPerSecond: { 'fast-model': 10_000_000 } },
      ['speedy'],
      [MODEL, 'fast-model'],
    );
    await user.submit(MODEL, 'write a long story');
    await user.submit('fast-model', 'write a long story');
    await serve(workers, (_n, job) => prose(job.model, prompt(job)).repeat(4));
    // Only the model whose cap it beat; the other model's cap is higher.
    expect(await strikes('speedy')).toEqual([{ kind: 'too_fast' }]);
    expect(await standing('speedy')).toBe('probation');
    const [reversed] = await q<{ job_id: string; model: string }>(
      't_rev',
      'SELECT r.job_id, m.name AS model FROM point_reversals r JOIN models m ON m.id = r.model_id',
    );
    expect(reversed!.model).toBe(MODEL);
    expect(await pointsOf('speedy')).toBe(1);
  });

  it('a suspended node gets no job and cannot report; reinstated, it serves again', async () => {
    const { user, workers, keys } = await start({}, ['bad', 'good']);
    const bad = workers.get('bad')!;
    const { id } = (await q<{ id: number }>('t_id', "SELECT id::int FROM nodes WHERE name = 'bad'"))[0]!;
    await user.submit(MODEL, 'a job held by bad');
    const held = (await bad.getJob())!;
    for (let i = 0; i < DEFAULT_VERIFY.strikesToSuspend; i++)
      await strikeNode(t.db, id, held.job_id, 'replay', {}, 3600, DEFAULT_VERIFY.strikesToSuspend);
    await runCommand(t.db, ['node', 'audit', 'bad'], bufferIo()); // readable while suspended
    // Before the caches hear of it, its session still names models: its poll gets nothing, and
    // does not hide the queued job from the others.
    await user.submit(MODEL, 'a job for the good');
    expect(await bad.getJob()).toBeNull();
    const forGood = (await workers.get('good')!.getJob())!;
    expect(prompt(forGood)).toBe('a job for the good');
    await workers.get('good')!.report(forGood, prose(MODEL, prompt(forGood)));
    // The caches learn of it with the key events the auditor announces.
    // ("keys changed", as nodes_announce would say it with no node: every cache forgets)
    const { LOCAL_KEY_EVENT } = await import('../src/repositories/key-events.js');
    t.db.events.emit(LOCAL_KEY_EVENT, '', 'keys::');
    // Its answer to the job it held is not taken: the job goes back to the queue, for another node.
    const late = await bad.report(held);
    expect(late.json()).toMatchObject({ status: 'error', points: 0 });
    await user.submit(MODEL, 'another job');
    expect(await bad.getJob()).toBeNull();
    expect((await bad.post('/worker/update_models', { node_url: 'bad', models: [MODEL] }, true)).statusCode).toBe(403);
    // Nor can it mint points with its node key (CREDIT_POLICY=reports).
    const minted = await t.app.inject({
      method: 'POST',
      url: '/worker/update_result',
      payload: { job_id: 'invented-1', api_key: keys.get('bad'), model_name: MODEL, result: { message: 'x' }, status: 'success' },
    });
    expect(minted.statusCode).toBe(403);
    expect(minted.json().detail).toMatch(/^Node is suspended/);
    await serve(new Map([['good', workers.get('good')!]]), (_n, job) => prose(MODEL, prompt(job)));
    expect(await pointsOf('good')).toBe(3);

    const io = bufferIo();
    expect(await runCommand(t.db, ['node', 'reinstate', 'bad'], io)).toBe(0);
    expect(io.stdout).toEqual(['node "bad" reinstated: trusted again']);
    expect(await runCommand(t.db, ['node', 'reinstate', 'bad'], bufferIo())).toBe(1);
    expect((await bad.post('/worker/update_models', { node_url: 'bad', models: [MODEL] }, true)).statusCode).toBe(200);
    await user.submit(MODEL, 'a job for the reinstated');
    expect(await bad.getJob()).not.toBeNull();
  });

  it('hands a copy to a worker that starts long-polling after it was queued, and to one that polls without waiting', async () => {
    const { user, workers } = await start({ share: 1 }, ['first', 'second', 'third']);
    for (const [i, checker] of ['second', 'third'].entries()) {
      const content = `a question worth checking, take ${i}`;
      await user.submit(MODEL, content, { temperature: 0 });
      const job = (await workers.get('first')!.getJob())!;
      expect((await workers.get('first')!.report(job, prose(MODEL, content))).statusCode).toBe(200);
      // The audit queues the copy while nobody waits for it.
      // (a poll that looks once finds it once the server has counted it: helpers/audits.ts)
      await until(
        'the copy',
        async () =>
          (await q<{ n: number }>('t_copy', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'verify' AND state = 'queued'"))[0]!.n === 1 &&
          (await copiesCounted(t.app)) >= i + 1,
      );
      const copy = i === 0 ? await workers.get(checker)!.getJob(5) : await workers.get(checker)!.getJob();
      expect(copy && prompt(copy)).toBe(content);
      expect((await workers.get(checker)!.report(copy!, prose(MODEL, content))).statusCode).toBe(200);
    }
  });

  it('hands a copy its own node cannot take on to another waiting node, without the recheck', async () => {
    // The checked node's second session waits longest, so the audit's copy is offered to it
    // first; the round that cannot take it (a copy never goes to the node it checks) wakes the
    // other waiting polls of its model (src/jobs/dispatcher.ts handOn). The dispatcher's
    // once-a-second recheck, which used to find it, is off: without the hand-on the checker's
    // poll ends empty.
    t = await startApp(backend, { verify: { ...VERIFY, share: 1 }, dispatch: { recheck: false } });
    const user = new TestUser(t.app, await t.addUser());
    const key = await t.addNode('checked');
    const [a, b] = [await new TestWorker(t.app, 'checked', key).start([MODEL]), await new TestWorker(t.app, 'checked', key).start([MODEL])];
    const checker = await new TestWorker(t.app, 'checker', await t.addNode('checker')).start([MODEL]);
    // Each poll waits with its first look done: a submission during a look would pass that poll by.
    const waiting = () => t.app.service.coordinator.idleWorkers;
    const aPoll = a.getJob(30);
    await expect.poll(waiting).toBe(1);
    const bPoll = b.getJobRaw(30);
    await expect.poll(waiting).toBe(2);
    const checkerPoll = checker.getJob(30);
    await expect.poll(waiting).toBe(3);
    const content = 'a question worth checking';
    await user.submit(MODEL, content, { temperature: 0 });
    const job = (await aPoll)!;
    expect(prompt(job)).toBe(content);
    expect((await a.report(job, prose(MODEL, content))).statusCode).toBe(200);
    const copy = await checkerPoll;
    expect(copy && prompt(copy)).toBe(content);
    expect((await checker.report(copy!, prose(MODEL, content))).statusCode).toBe(200);
    // The checked node's other session got nothing; its deregistration ends its poll.
    expect((await b.deregister()).statusCode).toBe(200);
    expect((await bPoll).json()).toEqual({ job_data: null });
  });

  it("takes back a report that raced with its node's suspension when it audits that job", async () => {
    // The race, made still: the report is credited (the node was in good standing when its
    // statement ran), then the node is suspended by strikes whose reversal did not see it.
    const { user, workers } = await start({ enabled: false }, ['racer']);
    const racer = workers.get('racer')!;
    const { id } = (await q<{ id: number }>('t_id', "SELECT id::int FROM nodes WHERE name = 'racer'"))[0]!;
    await user.submit(MODEL, 'a job answered as the suspension lands', { temperature: 0 });
    const job = (await racer.getJob())!;
    expect((await racer.report(job, prose(MODEL, prompt(job)))).json()).toMatchObject({ status: 'success' });
    expect(await pointsOf('racer')).toBe(1);
    for (let i = 0; i < DEFAULT_VERIFY.strikesToSuspend; i++)
      await strikeNode(t.db, id, job.job_id, 'replay', {}, 3600, DEFAULT_VERIFY.strikesToSuspend);
    expect(await standing('racer')).toBe('suspended');
    // Its audit comes after (the completing statement queues it; VERIFY is off here, so the test does).
    await q('t_queue', 'INSERT INTO job_audits (job_id, finished_at) VALUES ($1::uuid, now())', [job.job_id]);
    const report = await auditBatch(t.db, {
      verify: { ...DEFAULT_VERIFY, ...VERIFY },
      onlineWindow: 60,
      modelsTtl: 3600,
      jobTimeout: 60,
      checks: t.app.service.coordinator.lifecycle,
    });
    expect(report).toMatchObject({ audited: 1, copies: 0, reversedPoints: 1 });
    expect(await pointsOf('racer')).toBe(0);
    expect(await q('t_ledger', 'SELECT job_id::text, reason FROM point_reversals')).toEqual([{ job_id: job.job_id, reason: 'suspended' }]);
    const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
    expect(stored).toEqual(recomputed);
  });

  it('a maintenance round takes back a late credit of a node suspended within the evidence window, and leaves older suspensions alone', async () => {
    // Late credits, made still: each node's success is credited, then the node is marked
    // suspended directly (no reversal ran), `recent` ten seconds ago, `old` longer ago than the
    // evidence window, whose round would have had a whole window to find such a credit.
    const { user, workers } = await start({ enabled: false }, ['recent', 'old']);
    for (const name of ['recent', 'old']) {
      await user.submit(MODEL, `a job of ${name}`, { temperature: 0 });
      const w = workers.get(name)!;
      const job = (await w.getJob())!;
      expect((await w.report(job, prose(MODEL, prompt(job)))).json()).toMatchObject({ status: 'success' });
    }
    const window = 3600;
    await q(
      't_suspend',
      `INSERT INTO node_standing (node_id, state, changed_at)
      SELECT id, 'suspended', now() - make_interval(secs => CASE WHEN name = 'recent' THEN 10 ELSE $1::float8 + 60 END) FROM nodes WHERE name IN ('recent', 'old')`,
      [window],
    );
    // The old suspension's credit is older than its suspension too: its job dates from then.
    await q(
      't_backdate',
      `UPDATE job_results r SET received_at = r.received_at - make_interval(secs => $1::float8 + 120)
      FROM nodes n WHERE n.id = r.node_id AND n.name = 'old'`,
      [window],
    );
    const r = await ownRound(t.db, {
      verify: { ...DEFAULT_VERIFY, ...VERIFY, evidenceWindow: window },
      onlineWindow: 60,
      modelsTtl: 3600,
      jobTimeout: 60,
      tickSeconds: 1,
      checks: t.app.service.coordinator.lifecycle,
    });
    expect(r.reversed).toBe(1);
    expect(await pointsOf('recent')).toBe(0);
    expect(await q('t_ledger', 'SELECT n.name, r.reason FROM point_reversals r JOIN nodes n ON n.id = r.node_id')).toEqual([
      { name: 'recent', reason: 'suspended' },
    ]);
  });

  it('probes look like any job on the wire, come from fresh prompts, and nobody can read them', async () => {
    // The app itself makes no probes here (VERIFY_PROBE_INTERVAL 0): the test makes them.
    const { user, workers } = await start({}, ['p-1', 'p-2']);
    for (let i = 0; i < 5; i++) {
      const r = await ownRoundApplied(t, { ...VERIFY, probeInterval: 1 });
      expect(r.probed).toHaveLength(1);
      expect(r.outcome).toBeDefined();
    }
    await user.submit(MODEL, 'a user job', { temperature: 0 });
    const jobs: Job[] = [];
    for (let j = await workers.get('p-1')!.getJob(); j; j = await workers.get('p-1')!.getJob()) {
      jobs.push(j);
      await workers.get('p-1')!.report(j, prose(MODEL, prompt(j)));
    }
    expect(jobs).toHaveLength(6);
    const shapes = new Set(jobs.map((j) => Object.keys(j).sort().join(',')));
    // A share of probes streams, as users' jobs through /v1 do (verify/probes.ts STREAMED_SHARE).
    for (const shape of shapes)
      expect([
        'api_key,job_id,max_output,messages,model,seed,temperature',
        'api_key,job_id,max_output,messages,model,seed,stream,temperature',
      ]).toContain(shape);
    const probes = jobs.filter((j) => prompt(j) !== 'a user job');
    expect(new Set(probes.map(prompt)).size).toBe(5);
    expect(probes.every((p) => p.temperature === 0)).toBe(true);
    for (const p of probes) expect((await user.result(p.job_id)).statusCode).toBe(404);
  });

  it('reverses exactly once, and every aggregate equals its recomputation across days', async () => {
    t = await startApp(backend, { verify: VERIFY });
    const ids: Record<string, number> = {};
    for (const n of ['keep', 'lose']) {
      await t.addNode(n);
      ids[n] = (await q<{ id: number }>('t_node', 'SELECT id::int FROM nodes WHERE name = $1::text', [n]))[0]!.id;
    }
    const now = Date.now();
    let k = 0;
    for (const n of ['keep', 'lose']) {
      for (const daysAgo of [0, 0, 1, 3, 3, 10]) {
        for (const model of ['m-a', 'm-b']) {
          await recordResult(t.db, {
            nodeId: ids[n]!,
            jobId: `j-${k++}`,
            modelName: model,
            status: 'success',
            result: { message: 'x' },
            defaultPoints: 1.5,
            receivedAt: new Date(now - daysAgo * 86_400_000 - k * 1000),
          });
        }
      }
    }
    const before = await totalPoints(t.db);
    const first = await t.db.transaction((tx) => reverse(tx, { nodes: [{ nodeId: ids.lose!, seconds: 4 * 86_400 }], jobIds: ['j-0'] }, 'test'));
    // lose's 10 results of the last 4 days, and keep's j-0.
    expect(first).toEqual({ results: 11, points: 16.5 });
    expect(await t.db.transaction((tx) => reverse(tx, { nodes: [{ nodeId: ids.lose!, seconds: 4 * 86_400 }], jobIds: ['j-0'] }, 'again'))).toEqual({
      results: 0,
      points: 0,
    });
    expect(await totalPoints(t.db)).toBe(before - 16.5);
    // A reversed result is final: its node re-sending the report is a replay that credits nothing.
    const again = { nodeId: ids.keep!, jobId: 'j-0', modelName: 'm-a', result: { message: 'x' }, defaultPoints: 1.5 };
    expect(await recordResult(t.db, { ...again, status: 'success' })).toEqual({ kind: 'replayed', status: 'success' });
    expect(await recordResult(t.db, { ...again, status: 'error' })).toMatchObject({ kind: 'conflict' });
    expect(await totalPoints(t.db)).toBe(before - 16.5);
    const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
    expect(stored).toEqual(recomputed);
    // unique_nodes and daily_points answer from the same aggregates, caches included.
    const nodes = (
      await t.app.inject({ method: 'GET', url: '/unique_nodes?model_name=m-a&start_date=' + new Date(now - 2 * 86_400_000).toISOString() })
    ).json();
    expect(nodes.nodes).toEqual(['keep']);
    const daily = (
      await t.app.inject({
        method: 'POST',
        url: '/daily_points',
        headers: { api_key: await t.addReader() },
        payload: { node_name: 'lose', last_days: 12 },
      })
    ).json();
    expect(daily.map((d: { points: number }) => d.points).reduce((a: number, b: number) => a + b, 0)).toBe(3);
  });
});
