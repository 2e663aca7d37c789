// Score checks through the real app on both backends (issue 31; src/verify/scores.ts): workers
// speak the wire with inject, and the scorers report scores the test chooses, so the judging
// and its storage are exercised on each database without a model. What the scores of real
// models look like is test/token-audit-gguf.test.ts's.
// - a node that declared `score` gets a check carrying the audited request and answer; a
//   session without it (the seed's worker) never leases one;
// - an answer two scorers find foreign moves its node's test; three such answers suspend it
//   (impostor) with its points reversed, every aggregate equal to its recomputation;
// - answers in line: agreements, no strike;
// - scorers that disagree are decided by a third: the scorer it contradicts gets a
//   `false_score` strike; with no third scorer online nobody is struck (issue 53);
// - checks carry the answer's tokens as a node reports them (helpers/scores.ts TOKENS_AS_REPORTED):
//   what a scorer that re-tokenized the text may conclude is test/one-word.test.ts's;
// - with no scorer online, temperature-0 jobs are copied as before and counted as checked the
//   weaker way; sampled jobs are then left unchecked.
import { afterEach, describe, expect, it } from 'vitest';
import type { VerifyConfig } from '../src/config-verify.js';
import { runCommand } from '../src/cli/commands.js';
import { bufferIo } from '../src/cli/io.js';
import { backends } from './helpers/db.js';
import { auditWaits } from './helpers/audits.js';
import { TOKENS_AS_REPORTED, workerScores } from './helpers/scores.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { totalPoints } from './helpers/state.js';
import { prose } from './helpers/behaviours.js';

const MODEL = 'score-model';
// No second look at answers found in line (VERIFY_SPOT_SHARE 0) but where a test asks for it.
const VERIFY: Partial<VerifyConfig> = { enabled: true, share: 1, probeInterval: 0, maxTokensPerSecond: 0, spotShare: 0 };
const POSITIONS = 20;
type ScoreJob = Job & { params?: { score?: { answer: string } } };

const scores = (foreign: boolean) => workerScores(foreign, POSITIONS);

describe.each(backends)('score checks on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  const start = async (scorers: string[], plain: string[], verify: Partial<VerifyConfig> = {}) => {
    t = await startApp(backend, { verify: { ...VERIFY, ...verify } });
    const user = new TestUser(t.app, await t.addUser());
    const workers = new Map<string, TestWorker>();
    for (const n of [...scorers, ...plain]) {
      const w = await new TestWorker(t.app, n, await t.addNode(n)).start([MODEL]);
      if (scorers.includes(n)) {
        const r = await w.post('/worker/update_models', { node_url: n, models: [MODEL], capabilities: { [MODEL]: ['score'] } }, true);
        expect(r.statusCode).toBe(200);
      }
      workers.set(n, w);
    }
    return { user, workers };
  };
  const { q, settled, until, standing, pointsOf, strikesOf: strikes } = auditWaits(() => t.db);
  const evidence = async (node: string) =>
    (
      await q<{ scored: number; copied: number; answers: number; flags: number }>(
        't_evidence',
        `SELECT e.scored, e.copied, e.answers, e.flags
    FROM node_token_evidence e JOIN nodes n ON n.id = e.node_id WHERE n.name = $1::text`,
        [node],
      )
    )[0];
  /**
   * The workers poll in turn and answer: a score check with the scores `foreign` says, a job with
   * prose. `tokens`: the checks carry the answer's tokens as reported (helpers/scores.ts).
   */
  const serve = async (workers: Map<string, TestWorker>, foreign: (node: string, job: ScoreJob) => boolean, done = settled, tokens = true) => {
    await until('the jobs to settle', async () => {
      for (const [name, w] of workers) {
        if (tokens) await q('t_tokens', TOKENS_AS_REPORTED);
        const job = (await w.getJob()) as ScoreJob | null;
        if (!job) continue;
        const res = job.params?.score
          ? await w.reportScores(job, scores(foreign(name, job)))
          : await w.report(job, prose(MODEL, job.messages.at(-1)!.content));
        expect(res.statusCode).toBe(200);
      }
      return done();
    });
  };
  const only = (workers: Map<string, TestWorker>, ...names: string[]) => new Map(names.map((n) => [n, workers.get(n)!]));

  it('gives a scorer the audited request and answer, never a session without `score`; answers in line are agreements', {
    timeout: 120_000,
  }, async () => {
    const { user, workers } = await start(['scorer'], ['node', 'seed-worker']);
    const id = await user.submit(MODEL, 'tell me about tides', { temperature: 0.8, seed: 77, max_output: 40 });
    const first = (await workers.get('node')!.getJob())!;
    expect(first.job_id).toBe(id);
    const answer = prose(MODEL, 'tell me about tides');
    expect((await workers.get('node')!.report(first, answer)).statusCode).toBe(200);
    await until(
      'the score check',
      async () => (await q<{ n: number }>('t_checks', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'verify'"))[0]!.n === 1,
    );
    // The seed's worker (no capabilities) and the audited node itself are never given it.
    expect(await workers.get('seed-worker')!.getJob()).toBeNull();
    expect(await workers.get('node')!.getJob()).toBeNull();
    const check = (await workers.get('scorer')!.getJob()) as ScoreJob;
    expect(check).toMatchObject({ messages: first.messages, temperature: 0.8, seed: 77, max_output: 40, params: { score: { answer } } });
    expect(
      (
        await workers.get('scorer')!.post('/worker/update_result', {
          job_id: check.job_id,
          api_key: check.api_key,
          model_name: MODEL,
          status: 'success',
          result: { message: { role: 'assistant', content: '' }, scores: scores(false) },
        })
      ).statusCode,
    ).toBe(200);
    await until('the check judged', settled);
    for (let i = 0; i < 5; i++) await user.submit(MODEL, `question ${i}`, { temperature: i % 2 ? 0 : 0.7 });
    await serve(only(workers, 'node', 'scorer'), () => false);
    expect(await strikes('node')).toEqual([]);
    expect(await standing('node')).toBe('trusted');
    expect(await strikes('scorer')).toEqual([]);
    // The scorer serves the model too and took some of the jobs: the node's own were each scored, and agreed.
    const [own] = await q<{ n: number }>(
      't_own',
      "SELECT count(*)::int AS n FROM jobs j JOIN nodes n ON n.id = j.node_id WHERE n.name = 'node' AND j.kind = 'user'",
    );
    expect(own!.n).toBeGreaterThanOrEqual(2);
    expect(await evidence('node')).toMatchObject({ scored: own!.n, copied: 0, answers: own!.n, flags: 0 });
    const [agreements] = await q<{ n: number }>(
      't_agree',
      'SELECT s.agreements AS n FROM node_standing s JOIN nodes n ON n.id = s.node_id WHERE n.name = $1::text',
      ['node'],
    );
    // (and the copies it ran of the scorer's temperature-0 jobs, which nobody could score, agreed too)
    expect(agreements?.n).toBeGreaterThanOrEqual(own!.n);
  });

  it('suspends a node whose answers two scorers find foreign at its third, and reverses its points', { timeout: 120_000 }, async () => {
    const { user, workers } = await start(['scorer-1', 'scorer-2'], ['impostor']);
    for (let i = 0; i < 6; i++) await user.submit(MODEL, `question ${i}: what is a river?`, { temperature: i % 2 ? 0 : 0.8 });
    await serve(
      only(workers, 'impostor'),
      () => true,
      async () => (await q<{ n: number }>('t_q', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'user' AND state = 'done'"))[0]!.n === 6,
    );
    expect(await pointsOf('impostor')).toBe(6);
    // Every check is confirmed by the other scorer before it counts.
    await serve(only(workers, 'scorer-1', 'scorer-2'), () => true);
    expect(await standing('impostor')).toBe('suspended');
    const s = await strikes('impostor');
    // Flagged at its third judged answer (its test then starts again: its sixth flags it anew).
    expect(s.map((x) => x.kind)).toEqual(['impostor', 'impostor']);
    expect(s[0]!.evidence).toMatchObject({ answers: 3 });
    // The jobs reversed with it: every answer of its with evidence against it, judged in the same batch too.
    expect(s[0]!.evidence.jobs as number).toBeGreaterThanOrEqual(3);
    expect(await pointsOf('impostor')).toBe(0);
    expect(await strikes('scorer-1')).toEqual([]);
    expect(await strikes('scorer-2')).toEqual([]);
    // A point per answer left, and each score check its priced share (issue 55).
    const [done] = await q<{ n: number }>(
      't_done',
      "SELECT (count(*) FILTER (WHERE NOT is_check) + coalesce(sum(points) FILTER (WHERE is_check), 0))::float8 AS n FROM job_results WHERE status = 'success'",
    );
    expect(await totalPoints(t.db)).toBe(done!.n);
    const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
    expect(stored).toEqual(recomputed);
    // The operator's view says how it was checked.
    const io = bufferIo();
    expect(await runCommand(t.db, ['node', 'audit', 'impostor', '--json'], io)).toBe(0);
    expect(JSON.parse(io.stdout.join(''))).toMatchObject({ standing: 'suspended', token_checks: [{ model: MODEL, scored: 6, copied: 0, flags: 2 }] });
    const text = bufferIo();
    expect(await runCommand(t.db, ['node', 'audit', 'impostor'], text)).toBe(0);
    expect(text.stdout.join('\n')).toContain(`token-level checks of ${MODEL}: 6 jobs scored, 0 checked the weaker way`);
    // The dashboard's summary counts every kind of strike, these too.
    const network = (await t.app.inject({ url: '/network' })).json() as {
      verification: { strikes_24h: Record<string, number>; nodes_suspended: number };
    };
    expect(network.verification.strikes_24h).toEqual({
      disagreement: 0,
      replay: 0,
      too_fast: 0,
      give_up: 0,
      failure: 0,
      impostor: 2,
      false_request_error: 0,
      false_score: 0,
    });
    expect(network.verification.nodes_suspended).toBe(1);
  });

  /** Four sampled jobs, `node` answers them all, then `liar` takes each job's first check and calls the answer foreign. */
  const liarTakesEveryFirstCheck = async (user: TestUser, workers: Map<string, TestWorker>) => {
    for (let i = 0; i < 4; i++) await user.submit(MODEL, `question ${i}`, { temperature: 0.8 });
    await serve(
      only(workers, 'node'),
      () => false,
      async () => (await q<{ n: number }>('t_q', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'user' AND state = 'done'"))[0]!.n === 4,
    );
    await serve(
      only(workers, 'liar'),
      () => true,
      async () => (await q<{ n: number }>('t_q2', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'verify' AND state = 'done'"))[0]!.n === 4,
    );
  };

  it('strikes a scorer two others contradict (false_score), never the audited node', { timeout: 120_000 }, async () => {
    // Before issue 53 the second scorer's "in line" alone moved the first scorer's test (and with
    // no second scorer the first's "foreign" moved the node's): one party's word each time.
    const { user, workers } = await start(['liar', 'scorer', 'scorer-2'], ['node']);
    // The liar takes every first check and calls the answer foreign; the honest scorers confirm none.
    await liarTakesEveryFirstCheck(user, workers);
    await serve(only(workers, 'scorer', 'scorer-2', 'liar'), (n) => n === 'liar');
    expect(await strikes('node')).toEqual([]);
    expect(await standing('node')).toBe('trusted');
    // Each lying check is struck: the third strike suspends.
    expect((await strikes('liar')).map((x) => x.kind)).toEqual(['false_score', 'false_score', 'false_score', 'false_score']);
    expect(await standing('liar')).toBe('suspended');
    expect(await strikes('scorer')).toEqual([]);
    expect(await strikes('scorer-2')).toEqual([]);
    // The node keeps every point; the liar loses its own, its lying checks among them.
    expect(await pointsOf('node')).toBe(4);
    expect(await pointsOf('liar')).toBe(0);
    const network = (await t.app.inject({ url: '/network' })).json() as { verification: { strikes_24h: Record<string, number> } };
    expect(network.verification.strikes_24h.false_score).toBe(4);
    const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
    expect(stored).toEqual(recomputed);
  });

  it('with no third scorer online, a scorer contradicted by a second is not struck, nor is the node', { timeout: 120_000 }, async () => {
    const { user, workers } = await start(['liar', 'scorer'], ['node']);
    await liarTakesEveryFirstCheck(user, workers);
    await serve(only(workers, 'scorer', 'liar'), (n) => n === 'liar');
    expect(await strikes('node')).toEqual([]);
    expect(await strikes('liar')).toEqual([]);
    expect(await strikes('scorer')).toEqual([]);
    expect(await pointsOf('node')).toBe(4);
    const unconfirmed = /^ins_verification_total\{event="unconfirmed"\} (\d+)$/m.exec((await t.app.inject({ url: '/metrics' })).body)?.[1];
    expect(Number(unconfirmed)).toBe(4);
  });

  it('without a scorer online copies temperature-0 jobs as before, counted as checked the weaker way, and leaves sampled ones', {
    timeout: 120_000,
  }, async () => {
    const { user, workers } = await start([], ['a', 'b']);
    for (let i = 0; i < 4; i++) await user.submit(MODEL, `question ${i}`, { temperature: 0 });
    for (let i = 0; i < 3; i++) await user.submit(MODEL, `sampled ${i}`, { temperature: 0.9 });
    await serve(workers, () => false);
    const [copies] = await q<{ n: number }>('t_copies', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'verify'");
    expect(copies!.n).toBe(4);
    const [a, b] = [await evidence('a'), await evidence('b')];
    expect((a?.copied ?? 0) + (b?.copied ?? 0)).toBe(4);
    expect((a?.scored ?? 0) + (b?.scored ?? 0)).toBe(0);
  });
});
