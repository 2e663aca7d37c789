// Canaries (issue 31; src/verify/canaries.ts, docs/verification.md "Canaries") through the real
// app on both backends: workers speak the wire with inject and scorers report scores the test
// chooses, as in test/token-audit.test.ts.
// - answers two nodes agreed on (one answered, the other's scores found it in line) are kept as
//   references;
// - once they are gone, a node alone serving the model is sent canaries: score checks of those
//   references, shaped on the wire as the score checks the scorer had, never a request it saw;
// - an impostor alone (its scores of the honest references look foreign) is suspended at its
//   third canary, its points reversed; an honest node alone is not struck, and its canaries are
//   agreements; a lone node that cannot score gets none.
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_VERIFY, type VerifyConfig } from '../src/config-verify.js';
import { backends } from './helpers/db.js';
import { auditWaits, ownRound } from './helpers/audits.js';
import { workerScores } from './helpers/scores.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { prose } from './helpers/behaviours.js';

const MODEL = 'canary-model';
// The app makes no probes itself (VERIFY_PROBE_INTERVAL 0): the test runs the maintenance round.
const VERIFY: Partial<VerifyConfig> = { enabled: true, share: 1, probeInterval: 0, maxTokensPerSecond: 0 };
const POSITIONS = 20;
const REFERENCES = 4;
type ScoreJob = Job & { seed?: number; params?: { score?: { answer: string } } };

const scores = (foreign: boolean) => workerScores(foreign, POSITIONS);

describe.each(backends)('canaries on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  const { q, settled, until, standing, pointsOf } = auditWaits(() => t.db);
  const strikes = async (node: string) => q<{ kind: string; evidence: Record<string, unknown> }>('t_strikes', 'SELECT k.kind, k.evidence FROM node_strikes k JOIN nodes n ON n.id = k.node_id WHERE n.name = $1::text ORDER BY k.id', [node]);
  const scoreReport = (w: TestWorker, job: ScoreJob, foreign: boolean) => w.post('/worker/update_result', { job_id: job.job_id, api_key: job.api_key, model_name: job.model, status: 'success',
    result: { message: { role: 'assistant', content: '' }, scores: scores(foreign) } });
  const worker = async (name: string, score: boolean) => {
    const w = await new TestWorker(t.app, name, await t.addNode(name)).start([MODEL]);
    if (score) expect((await w.post('/worker/update_models', { node_url: name, models: [MODEL], capabilities: { [MODEL]: ['score'] } }, true)).statusCode).toBe(200);
    return w;
  };
  /** One maintenance round that may send a canary (chance 1): answers the models sent one. */
  const round = async () => {
    const lifecycle = t.app.service.coordinator.lifecycle;
    const r = await ownRound(t.db, { verify: { ...DEFAULT_VERIFY, ...VERIFY, probeInterval: 1 }, onlineWindow: 60, modelsTtl: 3600, jobTimeout: 60, tickSeconds: 1, checks: lifecycle });
    if (r?.outcome) lifecycle.apply(r.outcome);
    return r?.canaries ?? [];
  };

  /**
   * Node `a` answers REFERENCES jobs, node `b` scores each in line (their references), then both
   * leave: the model has no node online. Answers the score checks `b` was given.
   */
  const references = async () => {
    t = await startApp(backend, { verify: VERIFY });
    const user = new TestUser(t.app, await t.addUser());
    const [a, b] = [await worker('a', true), await worker('b', true)];
    for (let i = 0; i < REFERENCES; i++) await user.submit(MODEL, `question ${i}: why do rivers bend?`, { temperature: i % 2 ? 0 : 0.8, seed: 100 + i, max_output: 64 });
    for (let i = 0; i < REFERENCES; i++) {
      const job = (await a.getJob())!;
      expect((await a.report(job, prose(MODEL, job.messages.at(-1)!.content))).statusCode).toBe(200);
    }
    const checks: ScoreJob[] = [];
    await until('the references', async () => {
      const job = (await b.getJob()) as ScoreJob | null;
      if (job) {
        checks.push(job);
        expect((await scoreReport(b, job, false)).statusCode).toBe(200);
      }
      return checks.length === REFERENCES && settled();
    });
    const [kept] = await q<{ n: number }>('t_refs', 'SELECT count(*)::int AS n FROM canaries');
    expect(kept!.n).toBe(REFERENCES);
    expect((await a.deregister()).statusCode).toBe(200);
    expect((await b.deregister()).statusCode).toBe(200);
    return checks;
  };

  /** A round, then the lone worker's one job: the canary it was sent. */
  const canary = async (w: TestWorker): Promise<ScoreJob> => {
    expect(await round()).toHaveLength(1);
    const job = (await w.getJob()) as ScoreJob | null;
    expect(job?.params?.score).toBeDefined();
    return job!;
  };

  it('suspends an impostor that alone serves the model at its third canary, and reverses its points', { timeout: 120_000 }, async () => {
    const checks = await references();
    const impostor = await worker('impostor', true);
    const seen = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const job = await canary(impostor);
      // On the wire a score check like those `b` had: the same fields, one of their requests and answers.
      expect(Object.keys(job).sort()).toEqual(Object.keys(checks[0]!).sort());
      const like = checks.find((c) => c.messages[0]!.content === job.messages[0]!.content)!;
      expect({ ...job, job_id: like.job_id, api_key: like.api_key }).toEqual(like);
      seen.add(job.messages[0]!.content);
      expect((await scoreReport(impostor, job, true)).statusCode).toBe(200);
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
    const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
    expect(stored).toEqual(recomputed);
    // A suspended node is no longer online for the model: no more canaries.
    expect(await round()).toEqual([]);
  });

  it('does not strike an honest node that alone serves the model: its canaries are agreements, one per reference', { timeout: 120_000 }, async () => {
    await references();
    // A lone node that cannot score gets none.
    const plain = await worker('plain', false);
    expect(await round()).toEqual([]);
    expect(await plain.getJob()).toBeNull();
    expect((await plain.deregister()).statusCode).toBe(200);
    const honest = await worker('honest', true);
    for (let i = 0; i < REFERENCES; i++) {
      const job = await canary(honest);
      expect((await scoreReport(honest, job, false)).statusCode).toBe(200);
      await until('the canary judged', settled);
    }
    // Each reference checks a node once: it has seen them all.
    expect(await round()).toEqual([]);
    expect(await strikes('honest')).toEqual([]);
    expect(await standing('honest')).toBe('trusted');
    expect(await pointsOf('honest')).toBe(REFERENCES);
    const [evidence] = await q<{ answers: number; cusum: number; flags: number }>('t_evidence', `SELECT e.answers, e.cusum, e.flags
      FROM node_token_evidence e JOIN nodes n ON n.id = e.node_id WHERE n.name = 'honest'`);
    expect(evidence).toEqual({ answers: REFERENCES, cusum: 0, flags: 0 });
    const [agreements] = await q<{ n: number }>('t_agree', `SELECT s.agreements AS n FROM node_standing s JOIN nodes n ON n.id = s.node_id WHERE n.name = 'honest'`);
    expect(agreements?.n).toBe(REFERENCES);
  });
});
