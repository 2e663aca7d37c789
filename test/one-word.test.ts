// No conviction on one party's word (issue 53; src/verify/scores.ts, docs/verification.md
// "Token-level checks"): each attack of the issue performed through the real app on both
// backends, by nodes speaking the worker wire with inject — the liars are scripted nodes, and
// the scorers report scores the test chooses (test/helpers/scores.ts), as in
// test/token-audit.test.ts. Before issue 53 each of these struck or suspended the honest node,
// or left the liar untouched.
// - two nodes on a model, one of them a scorer that calls every answer of the other foreign:
//   the honest node is not struck (no second scorer, no third node for a copy: no verdict);
// - a scorer that clears garbage with made-up "in line" scores, beside honest scorers: a second
//   scorer's spot check finds the garbage foreign, a third agrees, the liar gets `false_score`
//   strikes (suspended at the third) and the garbage's node is convicted;
// - scorers that re-tokenized the text (no `params.score.tokens`) all find an honest answer
//   foreign (as honest scorers do on real vocabularies, whose texts have many tokenizations):
//   the node's test never moves; at temperature 0 a text copy decides, and the honest node is
//   not struck; a node whose text differs is convicted by the copies, not by the scores.
import { afterEach, describe, expect, it } from 'vitest';
import type { VerifyConfig } from '../src/config-verify.js';
import { backends } from './helpers/db.js';
import { auditWaits } from './helpers/audits.js';
import { TOKENS_AS_REPORTED, workerScores } from './helpers/scores.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { prose } from './helpers/behaviours.js';

const MODEL = 'word-model';
const VERIFY: Partial<VerifyConfig> = { enabled: true, share: 1, probeInterval: 0, maxTokensPerSecond: 0, minWordsForReplay: 1_000_000 };
const POSITIONS = 20;
type ScoreJob = Job & { params?: { score?: { answer: string; tokens?: unknown[] } } };

/** What each node does: scores a check (foreign or in line) and answers a job (its text, or none: it never polls for one). */
interface Behaviour {
  scores?: (job: ScoreJob) => boolean;
  answer?: (job: Job) => string;
}

describe.each(backends)("no conviction on one party's word, on $name", (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());
  const { q, settled, until, standing, pointsOf } = auditWaits(() => t.db);
  const strikes = async (node: string) =>
    (
      await q<{ kind: string }>(
        't_strikes',
        'SELECT k.kind FROM node_strikes k JOIN nodes n ON n.id = k.node_id WHERE n.name = $1::text ORDER BY k.id',
        [node],
      )
    ).map((s) => s.kind);
  const metric = async (event: string) =>
    Number(new RegExp(`^ins_verification_total\\{event="${event}"\\} (\\d+)$`, 'm').exec((await t.app.inject({ url: '/metrics' })).body)?.[1] ?? 0);
  const honestly = (job: Job) => prose(MODEL, job.messages.at(-1)!.content);

  const start = async (nodes: Record<string, Behaviour>, verify: Partial<VerifyConfig> = {}) => {
    t = await startApp(backend, { verify: { ...VERIFY, ...verify } });
    const user = new TestUser(t.app, await t.addUser());
    const workers = new Map<string, TestWorker>();
    for (const [name, b] of Object.entries(nodes)) {
      const w = await new TestWorker(t.app, name, await t.addNode(name)).start([MODEL]);
      if (b.scores)
        expect(
          (await w.post('/worker/update_models', { node_url: name, models: [MODEL], capabilities: { [MODEL]: ['score'] } }, true)).statusCode,
        ).toBe(200);
      workers.set(name, w);
    }
    return { user, workers };
  };
  /**
   * The nodes `names` poll in turn until `done`: each answers a score check as its behaviour
   * says, and a job with its text. `tokens`: score checks carry the answer's tokens as reported.
   */
  const serve = async (
    workers: Map<string, TestWorker>,
    nodes: Record<string, Behaviour>,
    names: string[],
    o: { tokens: boolean; done?: () => Promise<boolean> },
  ) => {
    await until('the jobs to settle', async () => {
      for (const name of names) {
        if (o.tokens) await q('t_tokens', TOKENS_AS_REPORTED);
        const w = workers.get(name)!;
        const job = (await w.getJob()) as ScoreJob | null;
        if (!job) continue;
        const b = nodes[name]!;
        const res = job.params?.score
          ? await w.reportScores(job, workerScores(b.scores!(job), POSITIONS))
          : await w.report(job, (b.answer ?? honestly)(job));
        expect(res.statusCode).toBe(200);
      }
      return (o.done ?? settled)();
    });
  };
  const userJobsDone = (n: number) => async () =>
    (await q<{ n: number }>('t_done', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'user' AND state = 'done'"))[0]!.n === n;
  const submit = async (user: TestUser, n: number) => {
    for (let i = 0; i < n; i++)
      await user.submit(MODEL, `question ${i}: what does a river carry?`, i % 2 ? { temperature: 0.8, seed: i } : { temperature: 0 });
  };
  const exact = async () => {
    const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
    expect(stored).toEqual(recomputed);
  };

  for (const tokens of [true, false]) {
    it(`two nodes on a model: a lone scorer calling every answer foreign strikes nobody (${tokens ? 'tokens forced' : 'text re-tokenized'})`, {
      timeout: 120_000,
    }, async () => {
      // The liar answers the copies it is given with garbage too.
      const nodes: Record<string, Behaviour> = {
        honest: { scores: () => false },
        liar: { scores: () => true, answer: (job) => `zzz ${job.messages.at(-1)!.content} qqq` },
      };
      const { user, workers } = await start(nodes);
      await submit(user, 6);
      await serve(workers, nodes, ['honest'], { tokens, done: userJobsDone(6) });
      await serve(workers, nodes, ['liar', 'honest'], { tokens });
      expect(await strikes('honest')).toEqual([]);
      expect(await standing('honest')).toBe('trusted');
      expect(await pointsOf('honest')).toBe(6);
      // Nobody confirmed the liar's word: no test moved; the sampled answers' verdicts are
      // unconfirmed, and the temperature-0 ones went to a text copy — the liar's own, which
      // disagreed, with no third node to decide.
      expect(
        await q('t_moved', "SELECT t.evidence FROM token_checks t JOIN nodes n ON n.id = t.node_id WHERE n.name = 'honest' AND t.evidence > 0"),
      ).toEqual([]);
      expect(await metric('unconfirmed')).toBe(3);
      expect(await metric('disagreement')).toBe(3);
      await exact();
    });
  }

  it('a scorer clearing garbage with made-up "in line" scores is struck (false_score) by a spot check and a third scorer, and the garbage\'s node convicted', {
    timeout: 120_000,
  }, async () => {
    const nodes: Record<string, Behaviour> = {
      garbage: { answer: (job) => `zzz ${job.messages.at(-1)!.content} qqq` },
      liar: { scores: () => false },
      'honest-1': { scores: () => true },
      'honest-2': { scores: () => true },
    };
    const { user, workers } = await start(nodes, { spotShare: 1 });
    await submit(user, 6);
    await serve(workers, nodes, ['garbage'], { tokens: true, done: userJobsDone(6) });
    // The liar takes every first check; the honest scorers then spot-check and decide.
    await serve(workers, nodes, ['liar'], {
      tokens: true,
      done: async () =>
        (await q<{ n: number }>('t_first', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'verify' AND state = 'done'"))[0]!.n === 6,
    });
    await serve(workers, nodes, ['honest-1', 'honest-2', 'liar'], { tokens: true });
    expect((await strikes('liar')).every((k) => k === 'false_score')).toBe(true);
    expect((await strikes('liar')).length).toBeGreaterThanOrEqual(3);
    expect(await standing('liar')).toBe('suspended');
    expect(await strikes('garbage')).toContain('impostor');
    expect(await standing('garbage')).toBe('suspended');
    expect(await pointsOf('garbage')).toBe(0);
    expect(await pointsOf('liar')).toBe(0);
    for (const h of ['honest-1', 'honest-2']) expect(await strikes(h)).toEqual([]);
    await exact();
  });

  it('scorers that re-tokenized the text convict nobody alone: an honest answer they all find foreign is cleared by a text copy', {
    timeout: 120_000,
  }, async () => {
    const nodes: Record<string, Behaviour> = { honest: {}, 'scorer-1': { scores: () => true }, 'scorer-2': { scores: () => true }, copier: {} };
    const { user, workers } = await start(nodes);
    await submit(user, 6);
    await serve(workers, nodes, ['honest'], { tokens: false, done: userJobsDone(6) });
    await serve(workers, nodes, ['scorer-1', 'scorer-2', 'copier'], { tokens: false });
    expect(await strikes('honest')).toEqual([]);
    expect(await standing('honest')).toBe('trusted');
    expect(await pointsOf('honest')).toBe(6);
    expect(await q('t_moved', 'SELECT t.evidence FROM token_checks t WHERE t.evidence > 0')).toEqual([]);
    // The temperature-0 answers were copied, and agreed; the sampled ones stay unconfirmed.
    const [copies] = await q<{ n: number }>(
      't_copies',
      "SELECT count(*)::int AS n FROM jobs WHERE kind = 'verify' AND request #> '{params,score}' IS NULL",
    );
    expect(copies!.n).toBe(3);
    expect(await metric('unconfirmed')).toBe(3);
    for (const n of Object.keys(nodes)) expect(await strikes(n)).toEqual([]);
    await exact();
  });

  it('scorers that re-tokenized the text convict through text copies only: a node whose answers differ is struck for disagreeing, never as an impostor', {
    timeout: 120_000,
  }, async () => {
    const nodes: Record<string, Behaviour> = {
      garbage: { answer: (job) => `zzz ${job.messages.at(-1)!.content} qqq` },
      'scorer-1': { scores: () => true },
      'scorer-2': { scores: () => true },
      copier: {},
    };
    const { user, workers } = await start(nodes);
    await submit(user, 6);
    await serve(workers, nodes, ['garbage'], { tokens: false, done: userJobsDone(6) });
    await serve(workers, nodes, ['scorer-1', 'scorer-2', 'copier'], { tokens: false });
    // Its 3 temperature-0 answers each contradicted by two copies: 3 strikes, suspended.
    expect(await strikes('garbage')).toEqual(['disagreement', 'disagreement', 'disagreement']);
    expect(await standing('garbage')).toBe('suspended');
    expect(await q('t_moved', 'SELECT t.evidence FROM token_checks t WHERE t.evidence > 0')).toEqual([]);
    for (const n of ['scorer-1', 'scorer-2', 'copier']) expect(await strikes(n)).toEqual([]);
    await exact();
  });
});
