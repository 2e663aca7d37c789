// Per-group thresholds of the token-level test (issue 31; src/verify/thresholds.ts,
// migrations/0021_token_thresholds.sql, docs/verification.md "Token-level checks").
// - pure: the test's direction for an answer depends on the thresholds passed;
// - through the real app on both backends (workers speak the wire with inject and the scorers
//   report scores the test chooses, as in test/token-audit.test.ts): honest nodes of a noisy
//   quantisation drift up under the defaults; `ins verify calibrate --apply` sets their group's
//   thresholds, after which their answers move them down while an impostor declaring the same
//   quantisation is still suspended; token_checks rows carry the quantisation;
// - calibrate itself, on rows it reads: only trusted, never-flagged nodes checked by
//   never-flagged checkers within the evidence window; too few answers: listed, not applied;
//   too noisy: never applied; --json; bad arguments exit 2 and change nothing; judging's pick
//   (the group's, else the model and method's for no quantisation, else the defaults).
import { afterEach, describe, expect, it } from 'vitest';
import type { VerifyConfig } from '../src/config-verify.js';
import { runCommand } from '../src/cli/commands.js';
import { bufferIo } from '../src/cli/io.js';
import { answerStats, type ScoredPosition } from '../src/verify/token-stats.js';
import { thresholdsOf } from '../src/verify/thresholds.js';
import { backends } from './helpers/db.js';
import { auditWaits } from './helpers/audits.js';
import { TOKENS_AS_REPORTED, workerScores } from './helpers/scores.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { prose } from './helpers/behaviours.js';

const MODEL = 'noisy-model';
const QUANT = 'Q2_K';
const POSITIONS = 20;
// No second look at answers found in line (VERIFY_SPOT_SHARE 0): each answer's checks are the test's.
const VERIFY: Partial<VerifyConfig> = { enabled: true, share: 1, probeInterval: 0, maxTokensPerSecond: 0, spotShare: 0 };
type ScoreJob = Job & { params?: { score?: { answer: string } } };

/** The positions of a score report with `mismatched` of `n` outside the checker's top 10. */
const positions = (n: number, mismatched: number): ScoredPosition[] => {
  const s = workerScores(false, n, mismatched);
  return s.rank.map((rank, i) => ({ rank, logprob: s.logprob[i]!, top_logprob: s.top_logprob[i]! }));
};

describe('thresholds of the token-level test', () => {
  it('judges the same answer by the thresholds it is given', () => {
    // 8 % confident mismatches: above the defaults' break-even (about 6.6 %), under a noisy group's.
    expect(answerStats(positions(100, 8), 0.8).evidence).toBeGreaterThan(0);
    expect(answerStats(positions(100, 8), 0.8, { p0: 0.1, p1: 0.5 }).evidence).toBeLessThan(0);
    // An impostor at 40 % still moves that group's test up.
    expect(answerStats(positions(100, 40), 0.8, { p0: 0.1, p1: 0.5 }).evidence).toBeGreaterThan(0);
  });
});

describe.each(backends)('token thresholds on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  const { q, settled, until, standing } = auditWaits(() => t.db);
  const command = async (argv: string[]) => {
    const io = bufferIo();
    const code = await runCommand(t.db, argv, io);
    return { code, out: io.stdout, err: io.stderr };
  };

  describe('judging a noisy group', () => {
    /** A node serving MODEL at QUANT; `score`: it declares it can score. */
    const worker = async (name: string, score: boolean) => {
      const w = await new TestWorker(t.app, name, await t.addNode(name)).start([MODEL]);
      const r = await w.post(
        '/worker/update_models',
        { node_url: name, models: [MODEL], builds: { [MODEL]: { quantization: QUANT } }, ...(score ? { capabilities: { [MODEL]: ['score'] } } : {}) },
        true,
      );
      expect(r.statusCode).toBe(200);
      return w;
    };
    // An answer's confident mismatches are its own (every scorer of the group finds the same
    // number): the answering worker writes it into the answer, the scorers read it back.
    const answer = (prompt: string, mismatched: number) => `${prose(MODEL, prompt)} [mismatched ${mismatched}]`;
    const mismatchedIn = (job: ScoreJob) => Number(/\[mismatched (\d+)\]$/.exec(job.params!.score!.answer)![1]);
    let n = 0;
    /**
     * Each node answers one job with its `mismatched` of POSITIONS confident mismatches; the
     * scorers score them (and confirm) until everything is judged. One answer per node a round,
     * so that each node's test moves in the order the test chose.
     */
    const round = async (user: TestUser, answers: { node: TestWorker; mismatched: number }[], scorers: TestWorker[]) => {
      for (const _ of answers) await user.submit(MODEL, `question ${n++}: why is the sea salty?`, { temperature: 0.8 });
      // Every node leases its job before any answer is reported: no check of this round exists
      // yet, so each lease is one of the round's users' jobs (a check would look the same).
      const leased = [];
      for (const a of answers) leased.push({ ...a, job: (await a.node.getJob())! as ScoreJob });
      for (const { node, mismatched, job } of leased) {
        expect(job.params?.score).toBeUndefined();
        expect((await node.report(job, answer(job.messages.at(-1)!.content, mismatched))).statusCode).toBe(200);
      }
      await until('the checks judged', async () => {
        for (const w of scorers) {
          // The checks carry the answer's tokens as a node reports them (issue 53: else no score convicts alone).
          await q('t_tokens', TOKENS_AS_REPORTED);
          const c = (await w.getJob()) as ScoreJob | null;
          if (!c) continue;
          expect(c.params?.score).toBeDefined();
          expect(
            (
              await w.post('/worker/update_result', {
                job_id: c.job_id,
                api_key: c.api_key,
                model_name: MODEL,
                status: 'success',
                result: { message: { role: 'assistant', content: '' }, scores: workerScores(false, POSITIONS, mismatchedIn(c)) },
              })
            ).statusCode,
          ).toBe(200);
        }
        return settled();
      });
    };
    const tests = async () =>
      q<{ name: string; cusum: number; flags: number }>(
        't_tests',
        `SELECT n.name, e.cusum, e.flags FROM node_token_evidence e JOIN nodes n ON n.id = e.node_id
      WHERE e.answers > 0 ORDER BY n.name`,
      );

    it('honest nodes drift up under the defaults and not under their calibrated thresholds; an impostor of the group is still suspended', {
      timeout: 240_000,
    }, async () => {
      t = await startApp(backend, { verify: VERIFY });
      const user = new TestUser(t.app, await t.addUser());
      const honest = [await worker('h1', true), await worker('h2', true), await worker('h3', true)];
      // 54 answers, each node's alternating 1 and 2 of 20 (5 %, 10 %: 7.5 % in all). Under the
      // defaults an answer at 10 % adds 1.47, one at 5 % takes 0.69: each node drifts up.
      for (let r = 0; r < 18; r++)
        await round(
          user,
          honest.map((node) => ({ node, mismatched: 1 + (r % 2) })),
          honest,
        );
      const before = await tests();
      expect(before.map((r) => r.name)).toEqual(['h1', 'h2', 'h3']);
      for (const r of before) {
        expect(r.cusum).toBeGreaterThan(5);
        expect(r.flags).toBe(0);
      }

      const calibrated = await command(['verify', 'calibrate', '--apply', '--json']);
      expect(calibrated.code).toBe(0);
      // 81 mismatches in 1,080 positions: Wilson's 99.9 % upper bound 0.1037, p0 = 1.5 × that rounded up, p1 = 3 × p0.
      expect(JSON.parse(calibrated.out[0]!)).toEqual({
        min_answers: 50,
        applied: 1,
        groups: [
          {
            model: MODEL,
            method: 'prefill',
            quantization: QUANT,
            answers: 54,
            positions: 1080,
            mismatches: 81,
            rate: 0.075,
            upper: expect.closeTo(0.1037, 4),
            status: 'proposed',
            proposed: { p0: 0.156, p1: 0.468 },
            current: { p0: 0.02, p1: 0.15 },
          },
        ],
      });
      const [set] = await q<{ p0: number; p1: number; answers: number }>('t_set', 'SELECT p0, p1, answers FROM token_thresholds');
      expect(set).toEqual({ p0: 0.156, p1: 0.468, answers: 54 });

      // The answers that moved them up (10 %) now move them down.
      const judged = (
        await q<{ ids: string[] }>('t_judged', 'SELECT coalesce(array_agg(check_id::text), ARRAY[]::text[]) AS ids FROM token_checks')
      )[0]!.ids;
      for (let r = 0; r < 2; r++)
        await round(
          user,
          honest.map((node) => ({ node, mismatched: 2 })),
          honest,
        );
      const fresh = await q<{ evidence: number }>('t_fresh', 'SELECT evidence FROM token_checks WHERE NOT (check_id::text = ANY($1::text[]))', [
        judged,
      ]);
      expect(fresh).toHaveLength(6);
      for (const r of fresh) expect(r.evidence).toBeLessThan(0);
      for (const r of await tests()) expect(r.cusum).toBeLessThan(before.find((b) => b.name === r.name)!.cusum);

      // An impostor declaring the same quantisation, at 40 %: suspended at its 4th answer (each adds 3.25 under the group's thresholds).
      const impostor = await worker('impostor', false);
      for (let i = 0; i < 4; i++) {
        expect(await standing('impostor')).toBe('trusted');
        await round(user, [{ node: impostor, mismatched: 8 }], honest);
      }
      expect(await standing('impostor')).toBe('suspended');
      const [strike] = await q<{ kind: string; evidence: { answers: number } }>(
        't_strike',
        `SELECT k.kind, k.evidence FROM node_strikes k JOIN nodes n ON n.id = k.node_id WHERE n.name = 'impostor'`,
      );
      expect(strike).toMatchObject({ kind: 'impostor', evidence: { answers: 4 } });
      for (const name of ['h1', 'h2', 'h3']) expect(await standing(name)).toBe('trusted');
      // Every judged check records the judged node's declared quantisation.
      expect(await q('t_quant', 'SELECT DISTINCT quantization FROM token_checks')).toEqual([{ quantization: QUANT }]);
    });
  });

  it('calibrate: only honest checks within the window; too few answers and too noisy are never applied; --json; bad arguments change nothing', {
    timeout: 120_000,
  }, async () => {
    t = await startApp(backend);
    const ids: Record<string, number> = {};
    for (const name of ['a', 'b', 'c', 'flagged', 'suspended']) {
      await t.addNode(name);
      ids[name] = (await q<{ id: number }>('t_id', 'SELECT id::int FROM nodes WHERE name = $1::text', [name]))[0]!.id;
    }
    const [{ id: model }] = (await q<{ id: number }>('t_model', `INSERT INTO models (name) VALUES ('cal-model') RETURNING id`)) as [{ id: number }];
    await q('t_flag', 'INSERT INTO node_token_evidence (node_id, model_id, flags) VALUES ($1::bigint, $2::int, 1)', [ids.flagged, model]);
    await q('t_suspend', `INSERT INTO node_standing (node_id, state) VALUES ($1::bigint, 'suspended')`, [ids.suspended]);
    /** `answers` checks of `node`'s answers by `checker`, `mismatched` of 20 positions each, judged `ago` seconds ago. */
    const checks = async (node: string, checker: string, method: string, quant: string | null, answers: number, mismatched: number, ago = 0) =>
      q(
        't_checks',
        `INSERT INTO token_checks (check_id, job_id, node_id, model_id, checker_id, method, positions, top1, mismatches, evidence, cusum, quantization, at)
        SELECT gen_random_uuid(), gen_random_uuid(), $1::bigint, $2::int, $3::bigint, $4::text, 20, 0.9, $5::int, 0, 0, $6::text, now() - make_interval(secs => $7::float8)
        FROM generate_series(1, $8::int)`,
        [ids[node], model, ids[checker], method, mismatched, quant, ago, answers],
      );
    await checks('a', 'c', 'prefill', 'Q4_K_M', 60, 1);
    // Left out: a flagged node's, a suspended node's, those a flagged or suspended node checked, those older than the window.
    await checks('flagged', 'c', 'prefill', 'Q4_K_M', 30, 15);
    await checks('suspended', 'c', 'prefill', 'Q4_K_M', 30, 15);
    await checks('a', 'flagged', 'prefill', 'Q4_K_M', 30, 15);
    await checks('a', 'suspended', 'prefill', 'Q4_K_M', 30, 15);
    await checks('b', 'c', 'prefill', 'Q4_K_M', 30, 15, 2 * 86_400);
    // Too few answers (nodes that declared no quantisation), and too noisy (20 %).
    await checks('b', 'c', 'prefill', null, 10, 1);
    await checks('a', 'b', 'replay', 'Q2_K', 60, 4);
    const stored = async () =>
      q<{ method: string; quantization: string; p0: number; p1: number; answers: number; positions: number; mismatches: number }>(
        't_stored',
        'SELECT method, quantization, p0, p1, answers, positions::int AS positions, mismatches::int AS mismatches FROM token_thresholds ORDER BY 1, 2',
      );

    // Bad arguments: exit 2, a message, nothing written.
    for (const argv of [
      ['verify', 'calibrate', '--min-answers', 'x', '--apply'],
      ['verify', 'calibrate', '--min-answers', '0', '--apply'],
      ['verify', 'calibrate', '--min-answers', '', '--apply'],
      ['verify', 'calibrate', 'extra', '--apply'],
      ['node', 'audit', 'a', '--apply'],
      ['verify', 'calibrate', '--apply=yes'],
    ]) {
      const r = await command(argv);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.err[0], argv.join(' ')).toMatch(/^ins: /);
      expect(r.out).toEqual([]);
    }
    expect(await stored()).toEqual([]);

    // Reviewed first: nothing written.
    const review = await command(['verify', 'calibrate', '--json']);
    expect(review.code).toBe(0);
    const defaults = { p0: 0.02, p1: 0.15 };
    const groups = [
      // 60 in 1,200: upper 0.0732, p0 0.11, p1 0.33.
      {
        model: 'cal-model',
        method: 'prefill',
        quantization: null,
        answers: 10,
        positions: 200,
        mismatches: 10,
        rate: 0.05,
        upper: expect.any(Number),
        status: 'too few answers',
        proposed: null,
        current: defaults,
      },
      {
        model: 'cal-model',
        method: 'prefill',
        quantization: 'Q4_K_M',
        answers: 60,
        positions: 1200,
        mismatches: 60,
        rate: 0.05,
        upper: expect.closeTo(0.0732, 4),
        status: 'proposed',
        proposed: { p0: 0.11, p1: 0.33 },
        current: defaults,
      },
      {
        model: 'cal-model',
        method: 'replay',
        quantization: 'Q2_K',
        answers: 60,
        positions: 1200,
        mismatches: 240,
        rate: 0.2,
        upper: expect.any(Number),
        status: 'too noisy',
        proposed: null,
        current: defaults,
      },
    ];
    expect(JSON.parse(review.out[0]!)).toEqual({ min_answers: 50, groups, applied: null });
    expect(await stored()).toEqual([]);
    const text = await command(['verify', 'calibrate']);
    expect(text.out[0]).toMatch(/^MODEL\s+METHOD\s+QUANTIZATION\s+ANSWERS\s+POSITIONS\s+RATE\s+UPPER\s+PROPOSED P0\/P1\s+CURRENT P0\/P1$/);
    expect(text.out.slice(1, 4)).toEqual([
      expect.stringMatching(/^cal-model\s+prefill\s+-\s+10\s+200\s+0\.0500\s+\S+\s+fewer than 50 answers\s+0\.02\/0\.15$/),
      expect.stringMatching(/^cal-model\s+prefill\s+Q4_K_M\s+60\s+1200\s+0\.0500\s+0\.0732\s+0\.11\/0\.33\s+0\.02\/0\.15$/),
      expect.stringMatching(/^cal-model\s+replay\s+Q2_K\s+60\s+1200\s+0\.2000\s+\S+\s+too noisy to judge by tokens\s+0\.02\/0\.15$/),
    ]);
    expect(text.out[4]).toBe('1 proposed; review them, then run again with --apply');

    // Applied: only the proposal; what judges the group now shows as current.
    const applied = await command(['verify', 'calibrate', '--apply']);
    expect(applied.out.at(-1)).toBe('applied 1 threshold');
    expect(await stored()).toEqual([{ method: 'prefill', quantization: 'Q4_K_M', p0: 0.11, p1: 0.33, answers: 60, positions: 1200, mismatches: 60 }]);
    const after = JSON.parse((await command(['verify', 'calibrate', '--json', '--min-answers', '10'])).out[0]!) as {
      groups: { quantization: string | null; status: string; current: unknown }[];
    };
    // 10 answers pass --min-answers 10, but 10 mismatches in 200 positions bound the rate only to 0.127: p1 would pass 0.5.
    expect(after.groups.map((g) => [g.quantization, g.status, g.current])).toEqual([
      [null, 'too noisy', defaults],
      ['Q4_K_M', 'proposed', { p0: 0.11, p1: 0.33 }],
      ['Q2_K', 'too noisy', defaults],
    ]);

    // Judging's pick: the group's, else its model and method's for no quantisation (''), else the defaults.
    await q(
      't_fallback',
      `INSERT INTO token_thresholds (model_id, method, quantization, p0, p1, answers, positions, mismatches) VALUES ($1::int, 'prefill', '', 0.05, 0.2, 1, 1, 1)`,
      [model],
    );
    const pick = await thresholdsOf(t.db, [model, model]);
    expect([
      pick(model, 'prefill', 'Q4_K_M'),
      pick(model, 'prefill', 'Q8_0'),
      pick(model, 'prefill', null),
      pick(model, 'replay', 'Q2_K'),
      pick(model + 1, 'prefill', 'Q4_K_M'),
    ]).toEqual([{ p0: 0.11, p1: 0.33 }, { p0: 0.05, p1: 0.2 }, { p0: 0.05, p1: 0.2 }, defaults, defaults]);
  });
});
