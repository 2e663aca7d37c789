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
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_VERIFY } from '../src/config-verify.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser } from './helpers/coordinator.js';
import { startWorker, until, type InProcessWorker } from './helpers/worker.js';
import { tinyModels } from './helpers/gguf.js';
import { seededPrompts } from './helpers/prompts.js';
import { tokenAudits, ownRound } from './helpers/audits.js';

const models = tinyModels();
afterAll(() => models.remove());
const MODEL = 'tiny:honest';
const HONEST_JOBS = Number(process.env.TOKEN_AUDIT_JOBS ?? 120);
/** Temperature-0 jobs whose answers become the references a noised honest node then answers alone. */
const CANARY_JOBS = 40;
const pglite = backends.find((b) => b.name === 'pglite')!;

const { prompt } = seededPrompts(20261126);

describe('token-level checks with real tiny models (gguf workers, embedded database)', () => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let workers: InProcessWorker[] = [];
  afterEach(async () => {
    for (const w of workers) await w.stop();
    workers = [];
    await t?.close();
  });

  // Replay detection off: a random tiny model gives one greedy answer to many prompts (a real
  // model does not), which verify/answers.ts rightly finds suspicious; it is not what is tested here.
  // Every job checked: a floor at the full rate (fixed checking, src/verify/check-rate.ts).
  const VERIFY = { enabled: true, share: 1, floor: 1, probeInterval: 0, maxTokensPerSecond: 0, minWordsForReplay: 1_000_000, spotShare: 0 };
  let url = '';
  const node = async (n: { name: string; seed: number; noise?: number }) => {
    const w = await startWorker({
      server: url,
      node: n.name,
      key: await t.addNode(n.name),
      backend: 'gguf',
      backendUrl: '',
      modelFile: models.file({ seed: n.seed, noise: n.noise ?? 0 }),
      models: [MODEL],
      threads: 1,
    });
    workers.push(w);
    return w;
  };
  const start = async (nodes: { name: string; seed: number; noise?: number }[], spotShare = 0) => {
    t = await startApp(pglite, { verify: { ...VERIFY, spotShare } });
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    for (const n of nodes) await node(n);
    return new TestUser(t.app, await t.addUser());
  };
  const { q, settled, strikes, standing, pointsOf, pointsExact } = tokenAudits(() => t.db);
  const submit = async (user: TestUser, n: number) => {
    for (let i = 0; i < n; i++)
      await user.submit(MODEL, prompt(), { max_output: 32, ...(i % 2 ? { temperature: 0.8, seed: i } : { temperature: 0 }) });
  };

  /** A convicted node's strikes: by its test (tokens forced: within 3 judged answers) or by text copies. */
  // `within`: the judged answers that may take (another model: 3; a heavier quantisation, whose
  // sampled answers mismatch less: 8, docs/verification.md "Calibration").
  const convicted = (s: { kind: string; evidence: Record<string, unknown> }[], within = 3) => {
    expect(s.length).toBeGreaterThan(0);
    for (const x of s) expect(['impostor', 'disagreement']).toContain(x.kind);
    if (s[0]!.kind === 'impostor') expect(s[0]!.evidence.answers as number).toBeLessThanOrEqual(within);
  };

  it('suspends an impostor, reverses its points, and strikes no honest node', { timeout: 300_000 }, async () => {
    const user = await start([
      { name: 'honest-1', seed: 1 },
      { name: 'honest-2', seed: 1, noise: 0.01 },
      { name: 'impostor', seed: 2 },
    ]);
    await submit(user, 30);
    await until('the jobs and their checks to settle', settled, 280_000);
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
    await submit(user, 30);
    await until('the jobs and their checks to settle', settled, 280_000);
    expect(await standing('honest')).toBe('trusted');
    expect((await strikes()).filter((s) => s.name === 'honest')).toEqual([]);
    // Not one check moved the honest node's test towards H.
    expect(
      await q(
        't_honest_evidence',
        `SELECT t.evidence FROM token_checks t JOIN nodes n ON n.id = t.node_id WHERE n.name = 'honest' AND t.evidence > 0`,
      ),
    ).toEqual([]);
    const disagreed = (await t.app.metrics.registry.getSingleMetricAsString('ins_verification_total')).match(/event="scorers_disagreed"} (\d+)/);
    expect(Number(disagreed?.[1] ?? 0)).toBeGreaterThan(0);
    await pointsExact();
  });

  it('flags a heavier quantisation of the model (20 % weight noise)', { timeout: 300_000 }, async () => {
    const user = await start([
      { name: 'honest-1', seed: 1 },
      { name: 'honest-2', seed: 1, noise: 0.01 },
      { name: 'noised', seed: 1, noise: 0.2 },
    ]);
    await submit(user, 40);
    await until('the jobs and their checks to settle', settled, 280_000);
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
    const user = await start(
      [
        { name: 'honest-1', seed: 1 },
        { name: 'honest-2', seed: 1, noise: 0.01 },
        { name: 'honest-3', seed: 1, noise: 0.01 },
      ],
      1,
    );
    await submit(user, 30);
    await until('the jobs and their checks to settle', settled, 280_000);
    const [refs] = await q<{ n: number }>('t_refs', 'SELECT count(*)::int AS n FROM canaries');
    // (the 15 temperature-0 answers, but an empty one)
    expect(refs!.n).toBeGreaterThanOrEqual(12);
    // Each reference knows how sure its scorers were at each character (one token per character here).
    expect(await q('t_gaps', 'SELECT job_id FROM canaries WHERE gaps IS NULL OR jsonb_array_length(gaps) <> char_length(answer)')).toEqual([]);
    for (const w of workers.splice(0)) await w.stop();
    // The maintenance round (the app's own makes no probes: VERIFY_PROBE_INTERVAL 0), with chance 1.
    const lifecycle = t.app.service.coordinator.lifecycle;
    const round = async () => {
      const r = await ownRound(t.db, {
        verify: { ...DEFAULT_VERIFY, ...VERIFY, probeInterval: 1 },
        onlineWindow: 60,
        modelsTtl: 3600,
        jobTimeout: 60,
        tickSeconds: 1,
        checks: lifecycle,
      });
      if (r?.outcome) lifecycle.apply(r.outcome);
    };
    /** Canaries one at a time to the node alone, until `done`. */
    const canaries = (what: string, done: () => Promise<boolean>) =>
      until(
        what,
        async () => {
          if (await done()) return true;
          if (await settled()) await round();
          return false;
        },
        240_000,
      );
    await node({ name: 'impostor', seed: 2 });
    await canaries('the impostor suspended', async () => (await standing('impostor')) === 'suspended');
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
    await canaries(
      'the honest node to answer every reference',
      async () =>
        (
          await q<{ n: number }>('t_left', "SELECT count(*)::int AS n FROM canaries c JOIN nodes n ON n.id = ANY(c.seen) WHERE n.name = 'honest-4'")
        )[0]!.n === refs!.n && settled(),
    );
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
    const user = await start(
      [
        { name: 'honest-1', seed: 1 },
        { name: 'honest-2', seed: 1, noise: 0.01 },
        { name: 'honest-3', seed: 1, noise: 0.01 },
      ],
      1,
    );
    // Temperature 0 only: each answer may become a reference (at most CANARIES_PER_MODEL kept).
    for (let i = 0; i < CANARY_JOBS; i++) await user.submit(MODEL, prompt(), { max_output: 32, temperature: 0 });
    await until('the jobs and their checks to settle', settled, 380_000);
    const [refs] = await q<{ n: number }>('t_refs', 'SELECT count(*)::int AS n FROM canaries');
    expect(refs!.n).toBeGreaterThanOrEqual(20);
    for (const w of workers.splice(0)) await w.stop();
    const lifecycle = t.app.service.coordinator.lifecycle;
    await node({ name: 'noised', seed: 1, noise: 0.01 });
    await until(
      'the noised node to answer every reference',
      async () => {
        if (
          (
            await q<{ n: number }>('t_left', "SELECT count(*)::int AS n FROM canaries c JOIN nodes n ON n.id = ANY(c.seen) WHERE n.name = 'noised'")
          )[0]!.n === refs!.n &&
          (await settled())
        )
          return true;
        if (await settled()) {
          const r = await ownRound(t.db, {
            verify: { ...DEFAULT_VERIFY, ...VERIFY, probeInterval: 1 },
            onlineWindow: 60,
            modelsTtl: 3600,
            jobTimeout: 60,
            tickSeconds: 1,
            checks: lifecycle,
          });
          if (r?.outcome) lifecycle.apply(r.outcome);
        }
        return false;
      },
      380_000,
    );
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
    const user = await start(
      [
        { name: 'honest-1', seed: 1 },
        { name: 'honest-2', seed: 1, noise: 0.01 },
        { name: 'honest-3', seed: 1, noise: 0.01 },
      ],
      1,
    );
    // In batches that settle in turn: all at once, the last jobs of a long run would wait past
    // their deadline (JOB_TIMEOUT) behind the others, and an expired job is not scored.
    for (let done = 0; done < HONEST_JOBS; done += 100) {
      await submit(user, Math.min(100, HONEST_JOBS - done));
      await until('the jobs and their checks to settle', settled, 550_000);
    }
    expect(await strikes()).toEqual([]);
    const [scored] = await q<{ n: number }>('t_scored', 'SELECT coalesce(sum(answers), 0)::int AS n FROM node_token_evidence');
    // (an empty answer is not scored)
    expect(scored!.n).toBeGreaterThanOrEqual(HONEST_JOBS * 0.9);
    await pointsExact();
  });
});
