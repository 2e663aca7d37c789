// Checks priced by their work (issue 55; src/jobs/sql/complete.ts, docs/verification.md) through
// the real app on both backends, workers speaking the wire with inject: a score check earns the
// model's points × VERIFY_CHECK_PRICE × the share of the answer's tokens it scored — credited once
// (a replayed report earns nothing more), in the node's days (daily_points, and apart from
// answers in /network/nodes/{name}) and in its ledger proof of the day, once each; a reversed
// check leaves the checks' part of the day equal to its recomputation.
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_VERIFY, type VerifyConfig } from '../src/config-verify.js';
import { reverse } from '../src/verify/reversal.js';
import { backends } from './helpers/db.js';
import { auditWaits } from './helpers/audits.js';
import { TOKENS_AS_REPORTED, workerScores } from './helpers/scores.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { prose } from './helpers/behaviours.js';

const MODEL = 'priced-model';
const VERIFY: Partial<VerifyConfig> = { enabled: true, share: 1, probeInterval: 0, maxTokensPerSecond: 0, spotShare: 0 };
const POSITIONS = 20;
type ScoreJob = Job & { params?: { score?: { answer: string; tokens?: unknown[] } } };

describe.each(backends)('checks priced by their work on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());
  const { q, settled, until } = auditWaits(() => t.db);

  it("credits a score check its tokens at VERIFY_CHECK_PRICE of the answer's rate, once, in its days and its ledger proof", {
    timeout: 120_000,
  }, async () => {
    t = await startApp(backend, { verify: VERIFY });
    // The model's points per job: 3 (a check earns its share of them).
    await q('t_points', 'INSERT INTO models (name, points_per_job) VALUES ($1::text, 3) ON CONFLICT (name) DO UPDATE SET points_per_job = 3', [
      MODEL,
    ]);
    const user = new TestUser(t.app, await t.addUser());
    const nodeKey = await t.addNode('node');
    const scorerKey = await t.addNode('scorer');
    const node = await new TestWorker(t.app, 'node', nodeKey).start([MODEL]);
    const scorer = await new TestWorker(t.app, 'scorer', scorerKey).start([MODEL]);
    expect(
      (await scorer.post('/worker/update_models', { node_url: 'scorer', models: [MODEL], capabilities: { [MODEL]: ['score'] } }, true)).statusCode,
    ).toBe(200);

    await user.submit(MODEL, 'tell me about tides', { temperature: 0.8, max_output: 200 });
    const job = (await node.getJob())!;
    const answer = prose(MODEL, 'tell me about tides');
    expect((await node.report(job, answer)).statusCode).toBe(200);
    await until(
      'the score check',
      async () => (await q<{ n: number }>('t_checks', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'verify'"))[0]!.n === 1,
    );
    // The answer's tokens as its node reported them: one per character (helpers/scores.ts).
    await q('t_tokens', TOKENS_AS_REPORTED);
    const check = (await scorer.getJob()) as ScoreJob;
    const tokens = check.params!.score!.tokens!.length;
    expect(tokens).toBe([...answer].length);
    expect(tokens).toBeGreaterThan(POSITIONS);
    const report = {
      job_id: check.job_id,
      api_key: check.api_key,
      model_name: MODEL,
      status: 'success',
      result: { message: { role: 'assistant', content: '' }, scores: workerScores(false, POSITIONS) },
    };
    const first = await scorer.post('/worker/update_result', report);
    expect(first.statusCode).toBe(200);
    // Its price: 3 points × VERIFY_CHECK_PRICE × the 20 positions it scored of the answer's tokens.
    const price = Math.round(3 * DEFAULT_VERIFY.checkPrice * (POSITIONS / tokens) * 1e6) / 1e6;
    expect(first.json()).toMatchObject({ points: price });
    // Sent again: nothing more.
    const again = await scorer.post('/worker/update_result', report);
    expect(again.statusCode).toBe(200);
    expect(again.json()).toMatchObject({ replayed: true, points: 0 });
    await until('the check judged', settled);

    const results = await q<{ job_id: string; points: number; is_check: boolean }>(
      't_results',
      "SELECT r.job_id, r.points::float8 AS points, r.is_check FROM job_results r JOIN nodes n ON n.id = r.node_id WHERE n.name = 'scorer'",
    );
    expect(results).toEqual([{ job_id: check.job_id, points: price, is_check: true }]);
    // The answer it checked earned the model's points, as before.
    const answered = await q<{ points: number; is_check: boolean }>(
      't_answer',
      "SELECT r.points::float8 AS points, r.is_check FROM job_results r JOIN nodes n ON n.id = r.node_id WHERE n.name = 'node'",
    );
    expect(answered).toEqual([{ points: 3, is_check: false }]);

    // Its days: daily_points (the seed's, field for field) and, apart from answers, its node view.
    const reader = await t.addReader();
    const daily = await t.app.inject({
      method: 'POST',
      url: '/daily_points',
      headers: { api_key: scorerKey },
      payload: { node_name: 'scorer', last_days: 1 },
    });
    expect(daily.statusCode).toBe(200);
    expect(daily.json()).toEqual([{ date: expect.any(String), points: price }]);
    const view = (await t.app.inject({ method: 'GET', url: '/network/nodes/scorer', headers: { api_key: reader } })).json();
    expect(view.points_days).toHaveLength(7);
    expect(view.points_days.at(-1)).toEqual({ day: daily.json()[0].date, points: price, answers: 0, checks: price, check_jobs: 1 });
    const nodeView = (await t.app.inject({ method: 'GET', url: '/network/nodes/node', headers: { api_key: reader } })).json();
    expect(nodeView.points_days.at(-1)).toMatchObject({ points: 3, answers: 3, checks: 0, check_jobs: 0 });
    let agg = await aggregatesAndRecomputation(t.db);
    expect(agg.stored).toEqual(agg.recomputed);

    // The ledger proof: the day closed (moved two days back so that it may close), its entries.
    for (const s of [
      "UPDATE job_results SET received_at = received_at - interval '2 days'",
      'UPDATE node_daily_points SET day = day - 2',
      "UPDATE model_node_days SET day = day - 2, first_success_at = first_success_at - interval '2 days', last_success_at = last_success_at - interval '2 days'",
      "UPDATE model_nodes SET first_success_at = first_success_at - interval '2 days', last_success_at = last_success_at - interval '2 days'",
    ].entries())
      await q(`t_shift_${s[0]}`, s[1]);
    const day = (await q<{ d: string }>('t_day', "SELECT (((now() AT TIME ZONE 'UTC')::date) - 2)::text AS d"))[0]!.d;
    await t.app.ledger.closer!.closeDue();
    const proof = (await t.app.inject({ url: `/ledger/days/${day}/nodes/scorer`, headers: { api_key: scorerKey } })).json();
    expect(proof.node).toMatchObject({ name: 'scorer', credits: 1, reversals: 0, points: String(price) });
    expect(proof.entries.filter((e: { job_id: string }) => e.job_id === check.job_id)).toEqual([
      expect.objectContaining({ kind: 'credit', points: String(price) }),
    ]);

    // Taken back (a false_score strike would): the checks' part of today's row goes with it.
    expect(await t.db.transaction((tx) => reverse(tx, { jobIds: [check.job_id] }, 'strike'))).toEqual({ results: 1, points: price });
    agg = await aggregatesAndRecomputation(t.db);
    expect(agg.stored).toEqual(agg.recomputed);
    const after = (await t.app.inject({ method: 'GET', url: '/network/nodes/scorer', headers: { api_key: reader } })).json();
    expect(after.points_days.at(-1)).toMatchObject({ points: -price, checks: -price, answers: 0 });
  });
});
