// Canaries (issue 31; src/verify/canaries.ts, docs/verification.md "Canaries") through the real
// app on both backends: workers speak the wire with inject and scorers report scores the test
// chooses, as in test/token-audit.test.ts.
// - answers three nodes agreed on (one answered at temperature 0, a scorer found it in line, and
//   a second scorer's spot check too) are kept as references (issue 53: never on one scorer's word);
// - once they are gone, a node alone serving the model is sent canaries: the references'
//   requests as ordinary jobs (issue 53), on the wire exactly as the user's job was when the
//   reference's node leased it, never a request it saw;
// - an impostor alone (its answers part from the references where their scorers were sure) is
//   suspended at its third canary, its points reversed; an honest node alone (it need not
//   declare `score`) answers as the references did: agreements, no strike;
// - colluders that answer garbage and find each other's answers in line plant no reference: an
//   honest node later alone on the model gets no canary of theirs and is not struck (issue 53).
import { afterEach, describe, expect, it } from 'vitest';
import type { VerifyConfig } from '../src/config-verify.js';
import { backends } from './helpers/db.js';
import { auditWaits, ownRoundApplied } from './helpers/audits.js';
import { workerScores } from './helpers/scores.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { prose } from './helpers/behaviours.js';

const MODEL = 'canary-model';
// The app makes no probes itself (VERIFY_PROBE_INTERVAL 0): the test runs the maintenance round.
// Every answer found in line is scored again by a second scorer (VERIFY_SPOT_SHARE 1).
const VERIFY: Partial<VerifyConfig> = { enabled: true, share: 1, probeInterval: 0, maxTokensPerSecond: 0, spotShare: 1 };
const POSITIONS = 20;
const REFERENCES = 4;
type ScoreJob = Job & { seed?: number; params?: { score?: { answer: string } } };

// One scored position per character of the answer (the tiny character vocabulary's tokens);
// `unsure`: the scorer's top-1 − top-2 gap at the first position is a near tie.
const scores = (foreign: boolean, job: ScoreJob, unsure = false) => {
  const s = workerScores(foreign, job.params?.score?.answer.length ?? POSITIONS);
  return unsure ? { ...s, gap: s.gap.map((g, i) => (i === 0 ? 0.5 : g)) } : s;
};

describe.each(backends)('canaries on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  const { q, settled, until, standing, pointsOf, strikesOf: strikes } = auditWaits(() => t.db);
  const scoreReport = (w: TestWorker, job: ScoreJob, foreign: boolean, unsure = false) => w.reportScores(job, scores(foreign, job, unsure));
  const worker = async (name: string, score: boolean) => {
    const w = await new TestWorker(t.app, name, await t.addNode(name)).start([MODEL]);
    if (score)
      expect(
        (await w.post('/worker/update_models', { node_url: name, models: [MODEL], capabilities: { [MODEL]: ['score'] } }, true)).statusCode,
      ).toBe(200);
    return w;
  };
  /** One maintenance round that may send a canary (chance 1): answers the models sent one. */
  const round = async () => (await ownRoundApplied(t, { ...VERIFY, probeInterval: 1 })).canaries ?? [];

  /**
   * Node `a` answers REFERENCES jobs at temperature 0, node `b` scores each in line, node `c`
   * spot-checks each in line (their references), then all leave: the model has no node online.
   * Answers the score checks `b` was given.
   */
  const references = async (unsure = false) => {
    t = await startApp(backend, { verify: VERIFY });
    const user = new TestUser(t.app, await t.addUser());
    const [a, b, c] = [await worker('a', true), await worker('b', true), await worker('c', true)];
    for (let i = 0; i < REFERENCES; i++)
      await user.submit(MODEL, `question ${i}: why do rivers bend?`, { temperature: 0, seed: 100 + i, max_output: 64 });
    const jobs: Job[] = [];
    for (let i = 0; i < REFERENCES; i++) {
      const job = (await a.getJob())!;
      jobs.push(job);
      expect((await a.report(job, prose(MODEL, job.messages.at(-1)!.content))).statusCode).toBe(200);
    }
    const checks: ScoreJob[] = [];
    await until('the first checks', async () => {
      const job = (await b.getJob()) as ScoreJob | null;
      if (job) {
        checks.push(job);
        expect((await scoreReport(b, job, false, unsure)).statusCode).toBe(200);
      }
      return checks.length === REFERENCES;
    });
    let spot = 0;
    await until('the references', async () => {
      const job = (await c.getJob()) as ScoreJob | null;
      if (job) {
        spot++;
        expect(job).toEqual({ ...checks.find((x) => x.messages[0]!.content === job.messages[0]!.content), job_id: job.job_id, api_key: job.api_key });
        expect((await scoreReport(c, job, false, unsure)).statusCode).toBe(200);
      }
      return spot === REFERENCES && settled();
    });
    const [kept] = await q<{ n: number }>('t_refs', 'SELECT count(*)::int AS n FROM canaries');
    expect(kept!.n).toBe(REFERENCES);
    for (const w of [a, b, c]) expect((await w.deregister()).statusCode).toBe(200);
    return jobs;
  };

  /** A round, then the lone worker's one job: the canary it was sent (an ordinary job: nothing to score). */
  const canary = async (w: TestWorker): Promise<ScoreJob> => {
    expect(await round()).toHaveLength(1);
    const job = (await w.getJob()) as ScoreJob | null;
    expect(job).not.toBeNull();
    expect(job!.params?.score).toBeUndefined();
    return job!;
  };
  const answer = (w: TestWorker, job: Job, honest: boolean) =>
    w.report(job, honest ? prose(MODEL, job.messages.at(-1)!.content) : `zzz ${job.messages.at(-1)!.content} qqq`);

  it('suspends an impostor that alone serves the model at its third canary, and reverses its points', { timeout: 120_000 }, async () => {
    const jobs = await references();
    const impostor = await worker('impostor', false);
    const seen = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const job = await canary(impostor);
      // On the wire the user's job the reference's node leased: the same fields and values, but its id and key.
      const like = jobs.find((c) => c.messages[0]!.content === job.messages[0]!.content)!;
      expect(Object.keys(job).sort()).toEqual(Object.keys(like).sort());
      expect({ ...job, job_id: like.job_id, api_key: like.api_key }).toEqual(like);
      seen.add(job.messages[0]!.content);
      expect((await answer(impostor, job, false)).statusCode).toBe(200);
      await until('the canary judged', settled);
      if (i < 2) expect(await standing('impostor')).toBe('trusted');
    }
    // Never the same request twice.
    expect(seen.size).toBe(3);
    expect(await standing('impostor')).toBe('suspended');
    const s = await strikes('impostor');
    expect(s.map((x) => x.kind)).toEqual(['impostor']);
    expect(s[0]!.evidence).toMatchObject({ answers: 3, jobs: 3 });
    expect(s[0]!.evidence.canary_of_job).toEqual(expect.any(String));
    // Its canaries earned it points as checks do; the suspension took them back.
    expect(await pointsOf('impostor')).toBe(0);
    expect(await strikes('a')).toEqual([]);
    expect(await strikes('b')).toEqual([]);
    expect(await strikes('c')).toEqual([]);
    const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
    expect(stored).toEqual(recomputed);
    // A suspended node is no longer online for the model: no more canaries.
    expect(await round()).toEqual([]);
  });

  it('does not strike an honest node that alone serves the model: its canaries are agreements, one per reference', { timeout: 120_000 }, async () => {
    await references();
    const honest = await worker('honest', false);
    for (let i = 0; i < REFERENCES; i++) {
      const job = await canary(honest);
      expect((await answer(honest, job, true)).statusCode).toBe(200);
      await until('the canary judged', settled);
    }
    // Each reference checks a node once: it has seen them all.
    expect(await round()).toEqual([]);
    expect(await strikes('honest')).toEqual([]);
    expect(await standing('honest')).toBe('trusted');
    expect(await pointsOf('honest')).toBe(REFERENCES);
    const [evidence] = await q<{ answers: number; cusum: number; flags: number }>(
      't_evidence',
      `SELECT e.answers, e.cusum, e.flags
      FROM node_token_evidence e JOIN nodes n ON n.id = e.node_id WHERE n.name = 'honest'`,
    );
    expect(evidence).toEqual({ answers: REFERENCES, cusum: 0, flags: 0 });
    const [agreements] = await q<{ n: number }>(
      't_agree',
      `SELECT s.agreements AS n FROM node_standing s JOIN nodes n ON n.id = s.node_id WHERE n.name = 'honest'`,
    );
    expect(agreements?.n).toBe(REFERENCES);
  });

  it('finds nothing against a lone node whose answers part from the references where their scorers were unsure (near ties)', {
    timeout: 120_000,
  }, async () => {
    await references(true);
    const lone = await worker('lone', false);
    for (let i = 0; i < REFERENCES; i++) {
      // It parts at the first character, where both scorers' top two were 0.5 nats apart.
      expect((await answer(lone, await canary(lone), false)).statusCode).toBe(200);
      await until('the canary judged', settled);
    }
    expect(await round()).toEqual([]);
    expect(await strikes('lone')).toEqual([]);
    expect(await standing('lone')).toBe('trusted');
    const [evidence] = await q<{ answers: number; cusum: number }>(
      't_evidence',
      `SELECT e.answers, e.cusum FROM node_token_evidence e JOIN nodes n ON n.id = e.node_id WHERE n.name = 'lone'`,
    );
    expect(evidence).toEqual({ answers: REFERENCES, cusum: 0 });
  });

  it('plants no reference for colluders that answer garbage and find each other in line: an honest node alone later is not struck', {
    timeout: 120_000,
  }, async () => {
    // Before issue 53 one scorer's "in line" made a reference: the colluders' garbage became
    // canaries, and the honest node that found them foreign was suspended at its third.
    t = await startApp(backend, { verify: VERIFY });
    const user = new TestUser(t.app, await t.addUser());
    const [x, y] = [await worker('colluder-x', true), await worker('colluder-y', true)];
    // With an honest scorer online too, for half of the jobs: it spot-checks their garbage.
    let honest: TestWorker | undefined;
    // (short: a stock answer to every prompt would be a suspected replay, another check's business)
    const garbage = (w: TestWorker, job: Job) => w.report(job, `zzz ${job.messages.at(-1)!.content.slice(6, 16)} qqq`);
    for (let round = 0; round < 2; round++) {
      if (round === 1) honest = await worker('honest-scorer', true);
      for (let i = 0; i < REFERENCES; i++)
        await user.submit(MODEL, `round ${round} question ${i}: why do rivers bend?`, { temperature: 0, seed: 200 + i, max_output: 64 });
      await until('the jobs and checks settled', async () => {
        for (const w of [x, y, honest]) {
          if (!w) continue;
          const job = (await w.getJob()) as ScoreJob | null;
          if (!job) continue;
          // Each colluder finds every answer in line; the honest scorer finds the garbage foreign.
          const res = job.params?.score
            ? await scoreReport(w, job, w === honest)
            : w === honest
              ? await w.report(job, prose(MODEL, job.messages.at(-1)!.content))
              : await garbage(w, job);
          expect(res.statusCode).toBe(200);
        }
        return settled();
      });
    }
    // None of the colluders' answers is a reference (the honest scorer's may be: the colluders find every answer in line).
    expect(
      await q(
        't_refs',
        `SELECT c.job_id FROM canaries c JOIN jobs j ON j.id = c.job_id JOIN nodes n ON n.id = j.node_id WHERE n.name LIKE 'colluder%'`,
      ),
    ).toEqual([]);
    for (const w of [x, y, honest!]) expect((await w.deregister()).statusCode).toBe(200);
    // The honest node alone: whatever canaries it is sent, it finds them in line, and nothing strikes it.
    const lone = await worker('honest', true);
    while ((await round()).length > 0) {
      const job = (await lone.getJob()) as ScoreJob;
      expect((await answer(lone, job, true)).statusCode).toBe(200);
      await until('the canary judged', settled);
    }
    expect(await strikes('honest')).toEqual([]);
    expect(await strikes('honest-scorer')).toEqual([]);
    expect(await standing('honest')).toBe('trusted');
  });
});
