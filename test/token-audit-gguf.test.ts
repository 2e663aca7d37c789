// Token-level checks end to end with real tiny models (issue 31): the real app (embedded
// database: the judging and its storage run on both backends in test/token-audit.test.ts), and
// `ins worker --backend gguf` in this process for each node (src/worker/worker.ts, gguf.ts),
// every job checked (VERIFY_SHARE=1), jobs alternating greedy and sampled at 0.8. Every gguf
// node declares `score`, so nodes check each other token by token. No verdict rests on one
// party's word (issue 53): a foreign verdict needs two scorers that agree, and where the scorer
// re-tokenized the answer's text (the node did not report its tokens) a text copy at
// temperature 0 decides instead, so a convicted node's strikes are `impostor` (tokens forced) or
// `disagreement` (text copies), whichever path judged it:
// - an impostor (another model of the same vocabulary) among two honest nodes is suspended, its
//   points reversed, and no honest node is struck (the impostor scores the honest nodes' answers
//   too: a second scorer contradicts it each time);
// - a heavier quantisation (the honest model with 20 % weight noise) is suspended;
// - honest nodes (one with 1 % noise on its weights: machines never agree bit for bit) collect
//   0 strikes over HONEST_JOBS jobs (TOKEN_AUDIT_JOBS; 2,000 answers through the same scoring and
//   statistics without the network: test/token-stats.test.ts with TOKEN_STATS_ANSWERS=2000),
//   every answer found in line scored again by a second scorer (VERIFY_SPOT_SHARE=1);
// - canaries (src/verify/canaries.ts): references are temperature-0 answers two scorers found in
//   line; once the three honest nodes that made them are gone, an impostor alone serving the
//   model is suspended within 3 of its canaries (sent as ordinary jobs: its own answers part from
//   the references where their scorers were sure), and an honest node alone after it answers
//   every reference, unstruck; a 1 %-noised honest node alone answers CANARY_JOBS' references
//   with no evidence against it (it parts from a reference only at near ties).
import { afterAll, describe, expect, it } from 'vitest';
import { until } from './helpers/worker.js';
import { tinyModels } from './helpers/gguf.js';
import { ownRoundApplied } from './helpers/audits.js';
import { seededPrompts } from './helpers/prompts.js';
import { EVERY_JOB_CHECKED, HONEST_NODES, tokenNodes, WITH_IMPOSTOR } from './helpers/token-nodes.js';

const models = tinyModels();
afterAll(() => models.remove());
const MODEL = 'tiny:honest';
const HONEST_JOBS = Number(process.env.TOKEN_AUDIT_JOBS ?? 120);
/** Temperature-0 jobs whose answers become the references a noised honest node then answers alone. */
const CANARY_JOBS = 40;
const { prompt } = seededPrompts(20261126);

describe('token-level checks with real tiny models (gguf workers, embedded database)', () => {
  // Every job checked, no second scorer unless a test asks (VERIFY_SPOT_SHARE).
  const VERIFY = { ...EVERY_JOB_CHECKED, spotShare: 0 };
  const { app, start, node, stopNodes, submit, settle, submitInBatches, q, settled, strikes, standing, pointsOf, pointsExact, evidenceTotals } =
    tokenNodes({
      model: MODEL,
      prompt,
      verify: VERIFY,
      serve: (n) => ({ backend: 'gguf', backendUrl: '', modelFile: models.file({ seed: n.seed, noise: n.noise ?? 0 }), threads: 1 }),
    });
  /** Half the jobs greedy, half sampled at 0.8 (seeded). */
  const alternating = (i: number) => (i % 2 ? { temperature: 0.8, seed: i } : { temperature: 0 });

  /**
   * A maintenance round of the test's own with probes due (the app's own makes none:
   * VERIFY_PROBE_INTERVAL 0), so that a node alone gets a canary with chance 1; its outcome applied.
   */
  const round = () => ownRoundApplied(app(), { ...VERIFY, probeInterval: 1 });
  /** Canaries one at a time to the node alone (a round whenever all is settled), until `done`. */
  const canaries = (what: string, done: () => Promise<boolean>, ms: number) =>
    until(
      what,
      async () => {
        if (await done()) return true;
        if (await settled()) await round();
        return false;
      },
      ms,
    );

  /** `node` has answered every one of the `refs` references, and nothing is left to settle. */
  const answeredEvery = async (node: string, refs: number) =>
    (
      await q<{ n: number }>('t_left', 'SELECT count(*)::int AS n FROM canaries c JOIN nodes n ON n.id = ANY(c.seen) WHERE n.name = $1::text', [node])
    )[0]!.n === refs && settled();

  /** A convicted node's strikes: by its test (tokens forced: within 3 judged answers) or by text copies. */
  // `within`: the judged answers that may take (another model: 3; a heavier quantisation, whose
  // sampled answers mismatch less: 8, docs/verification.md "Calibration").
  const convicted = (s: { kind: string; evidence: Record<string, unknown> }[], within = 3) => {
    expect(s.length).toBeGreaterThan(0);
    for (const x of s) expect(['impostor', 'disagreement']).toContain(x.kind);
    if (s[0]!.kind === 'impostor') expect(s[0]!.evidence.answers as number).toBeLessThanOrEqual(within);
  };

  it('suspends an impostor, reverses its points, and strikes no honest node', { timeout: 300_000 }, async () => {
    const user = await start(WITH_IMPOSTOR);
    await submit(user, 30, alternating);
    await settle(280_000);
    expect(await standing('impostor')).toBe('suspended');
    const all = await strikes();
    expect(all.filter((s) => s.name !== 'impostor')).toEqual([]);
    convicted(all.filter((s) => s.name === 'impostor'));
    expect(await pointsOf('impostor')).toBe(0);
    expect(await pointsOf('honest-1')).toBeGreaterThan(0);
    await pointsExact();
  });

  it('lets no two impostors of different models out-vote an honest node: scorers that disagree with each other decide nothing', {
    timeout: 300_000,
  }, async () => {
    // Each impostor finds the honest answers foreign, and the other confirms it, each in its own
    // way (an outside probe: before, the honest node was suspended first). Their scores of one
    // answer do not correlate, so no test moves; nor does the honest node's scoring convict either.
    const user = await start([
      { name: 'honest', seed: 1 },
      { name: 'impostor-a', seed: 2 },
      { name: 'impostor-b', seed: 3 },
    ]);
    await submit(user, 30, alternating);
    await settle(280_000);
    expect(await standing('honest')).toBe('trusted');
    expect((await strikes()).filter((s) => s.name === 'honest')).toEqual([]);
    // Not one check moved the honest node's test towards H.
    expect(
      await q(
        't_honest_evidence',
        `SELECT t.evidence FROM token_checks t JOIN nodes n ON n.id = t.node_id WHERE n.name = 'honest' AND t.evidence > 0`,
      ),
    ).toEqual([]);
    const disagreed = (await app().app.metrics.registry.getSingleMetricAsString('ins_verification_total')).match(/event="scorers_disagreed"} (\d+)/);
    expect(Number(disagreed?.[1] ?? 0)).toBeGreaterThan(0);
    await pointsExact();
  });

  it('flags a heavier quantisation of the model (20 % weight noise)', { timeout: 300_000 }, async () => {
    const user = await start([
      { name: 'honest-1', seed: 1 },
      { name: 'honest-2', seed: 1, noise: 0.01 },
      { name: 'noised', seed: 1, noise: 0.2 },
    ]);
    await submit(user, 40, alternating);
    await settle(280_000);
    expect(await standing('noised')).toBe('suspended');
    expect((await strikes()).filter((s) => s.name !== 'noised')).toEqual([]);
    convicted(
      (await strikes()).filter((s) => s.name === 'noised'),
      8,
    );
    expect(await pointsOf('noised')).toBe(0);
    await pointsExact();
  });

  it('canaries: an impostor alone is suspended at its 3rd canary that parts from a reference where it was sure; an honest node alone after it is not struck', {
    timeout: 300_000,
  }, async () => {
    // Three honest nodes: a reference is an answer, a scorer's "in line" and a second scorer's.
    const user = await start(HONEST_NODES, { spotShare: 1 });
    await submit(user, 30, alternating);
    await settle(280_000);
    const [refs] = await q<{ n: number }>('t_refs', 'SELECT count(*)::int AS n FROM canaries');
    // (the 15 temperature-0 answers, but an empty one)
    expect(refs!.n).toBeGreaterThanOrEqual(12);
    // Each reference knows how sure its scorers were at each character (one token per character here).
    expect(await q('t_gaps', 'SELECT job_id FROM canaries WHERE gaps IS NULL OR jsonb_array_length(gaps) <> char_length(answer)')).toEqual([]);
    await stopNodes();
    await node({ name: 'impostor', seed: 2 });
    await canaries('the impostor suspended', async () => (await standing('impostor')) === 'suspended', 240_000);
    const [first] = await strikes();
    expect(first).toMatchObject({ name: 'impostor', kind: 'impostor' });
    // At its 3rd canary that parted from a reference where the reference's scorers were sure (the
    // tiny model is unsure of about 4 in 10 answers' first character, where the impostor parts):
    // each such canary is an answer's worth of evidence, the others none.
    expect(first!.evidence.jobs).toBe(3);
    expect(first!.evidence.canary_of_job).toEqual(expect.any(String));
    expect(await pointsOf('impostor')).toBe(0);
    await node({ name: 'honest-4', seed: 1, noise: 0.01 });
    // Each reference once (those whose vouching nodes are in good standing: all of them here).
    await canaries('the honest node to answer every reference', () => answeredEvery('honest-4', refs!.n), 240_000);
    expect((await strikes()).filter((s) => s.name !== 'impostor')).toEqual([]);
    expect(await standing('honest-4')).toBe('trusted');
    const [judged] = await q<{ answers: number }>(
      't_judged',
      "SELECT e.answers FROM node_token_evidence e JOIN nodes n ON n.id = e.node_id WHERE n.name = 'honest-4'",
    );
    expect(judged!.answers).toBe(refs!.n);
    await pointsExact();
  });

  it('canaries: a 1 %-noised honest node alone parts from the references only where their scorers were unsure: never struck', {
    timeout: 400_000,
  }, async () => {
    const user = await start(HONEST_NODES, { spotShare: 1 });
    // Temperature 0 only: each answer may become a reference (at most CANARIES_PER_MODEL kept).
    await submit(user, CANARY_JOBS);
    await settle(380_000);
    const [refs] = await q<{ n: number }>('t_refs', 'SELECT count(*)::int AS n FROM canaries');
    expect(refs!.n).toBeGreaterThanOrEqual(20);
    await stopNodes();
    await node({ name: 'noised', seed: 1, noise: 0.01 });
    await canaries('the noised node to answer every reference', () => answeredEvery('noised', refs!.n), 380_000);
    expect(await strikes()).toEqual([]);
    const judged = await q<{ same: boolean; evidence: number }>(
      't_canaries',
      `SELECT j.result -> 'message' ->> 'content' = j.suspicion ->> 'answer' AS same, t.evidence
      FROM jobs j JOIN token_checks t ON t.check_id = j.id WHERE j.suspicion ? 'canary'`,
    );
    expect(judged).toHaveLength(refs!.n);
    // Most match outright; those that part do so at near ties: no evidence from any.
    expect(judged.filter((c) => c.same).length).toBeGreaterThan(refs!.n / 2);
    expect(judged.filter((c) => c.evidence > 0)).toEqual([]);
    await pointsExact();
  });

  it(`honest nodes checking each other: 0 strikes over ${HONEST_JOBS} jobs`, { timeout: 600_000 }, async () => {
    const user = await start(HONEST_NODES, { spotShare: 1 });
    await submitInBatches(user, HONEST_JOBS, 550_000, alternating);
    expect(await strikes()).toEqual([]);
    // (an empty answer is not scored)
    expect((await evidenceTotals()).answers).toBeGreaterThanOrEqual(HONEST_JOBS * 0.9);
    await pointsExact();
  });
});
