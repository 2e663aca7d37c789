// The statistics of token-level checks (src/verify/token-stats.ts), calibrated on real tiny
// models (scripts/tiny-gguf.ts) scored by the gguf backend (src/worker/gguf.ts). The checker
// is the honest model with its weights disturbed by 1 % (another machine's rounding: honest
// nodes never agree bit for bit); the audited nodes are
// - honest: the same model (seed 1);
// - a heavier quantisation: the same model with 20 % noise on its weights;
// - an impostor: another model of the same vocabulary (seed 2);
// - an impostor keeping the honest answer's word set: the honest answer's characters reordered,
//   and its words in reverse order (the tiny vocabulary writes no spaces: its "words" are its
//   pieces of 4 or 8 tokens, each kept whole, so only the junctions between them change).
// Jobs alternate greedy and sampled (temperature 0.8, seeded), prompts from a seeded generator.
// Shown: 200 real honest answers keep an honest node's test below half its threshold, their
// confident-mismatch rate stays below P0, and 2,000 answers
// drawn (seeded) from them never flag; the impostors are flagged at their 3rd judged answer
// (those reordering words too), the noised copy within 8. (Answers shorter than MIN_POSITIONS, which an impostor's can be, count
// for nothing: the bound is in answers long enough to judge.)
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Gguf } from '../src/worker/gguf.js';
import {
  answerStats,
  freshTest,
  observe,
  scorersAgree,
  ANSWER_CAP,
  H,
  MIN_POSITIONS,
  P0,
  type AnswerStats,
  type NodeTest,
} from '../src/verify/token-stats.js';
import { tinyModels } from './helpers/gguf.js';
import { seededPrompts } from './helpers/prompts.js';

const models = tinyModels();
afterAll(() => models.remove());
const M = 'tiny';

const { rand, prompt } = seededPrompts(20261125);
// TOKEN_STATS_ANSWERS=2000 scores that many real honest answers (about 2 minutes on a busy 2-core machine).
const HONEST = Number(process.env.TOKEN_STATS_ANSWERS ?? 200);
const jobs = Array.from({ length: Math.max(HONEST, 12) }, (_, i) => ({
  model: M,
  max_output: 32,
  temperature: i % 2 ? 0.8 : 0,
  seed: i,
  messages: [{ role: 'user', content: prompt() }],
}));
const reorder = (s: string) => {
  const a = [...s];
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a.join('');
};

/** The answer's pieces of `size` characters (one token each) in reverse order: the same words, no two of them adjacent as they were. */
const reorderWords = (size: number) => (s: string) => (s.match(new RegExp(`[^]{1,${size}}`, 'gu')) ?? []).reverse().join('');

let checker: Gguf;
const node = (seed: number, noise = 0) => new Gguf(models.file({ seed, noise }), M, true, 1, 1);
beforeAll(async () => {
  checker = node(1, 0.01);
  await checker.detect();
});

/** The node's answers to the first `n` jobs, each scored by the checker; `twist` changes the answer (a crafted liar). */
async function scored(writer: Gguf, n: number, twist: (a: string) => string = (a) => a): Promise<AnswerStats[]> {
  const out: AnswerStats[] = [];
  for (const job of jobs.slice(0, n)) {
    const answer = twist((await writer.chat(job)).content);
    out.push(answerStats((await checker.score(job, answer)).positions, job.temperature));
  }
  return out;
}
const flaggedAfter = (stats: AnswerStats[]): number | undefined => {
  let t: NodeTest = freshTest();
  for (const [i, s] of stats.entries()) if ((t = observe(t, s)).flagged) return i + 1;
  return undefined;
};

describe('token-level statistics on real tiny models', () => {
  it(`honest nodes checking each other: ${HONEST} real answers, then 2,000 drawn from them, no flag`, async () => {
    const honest = await scored(node(1), HONEST);
    const positions = honest.reduce((a, s) => a + s.positions, 0);
    const mismatches = honest.reduce((a, s) => a + s.confidentMismatches, 0);
    expect(positions).toBeGreaterThan(HONEST * 15);
    expect(mismatches / positions).toBeLessThan(P0);
    // The highest the honest node's test got over its real answers, and that it never flagged.
    let real = freshTest();
    let realHighest = 0;
    for (const s of honest) realHighest = Math.max(realHighest, (real = observe(real, s)).sum);
    expect({ flagged: real.flagged, below: realHighest < H / 2 }).toEqual({ flagged: false, below: true });
    let seed = 7;
    const draw = () => honest[(seed = (seed * 48271) % 2147483647) % honest.length]!;
    let t = freshTest();
    let highest = 0;
    for (let i = 0; i < 2000; i++) {
      t = observe(t, draw());
      highest = Math.max(highest, t.sum);
    }
    expect(t.flagged).toBe(false);
    expect(highest).toBeLessThan(H / 2);
  }, 900_000);

  it("an impostor, and one keeping the honest answer's characters, are flagged at their 3rd answer long enough to judge", async () => {
    for (const stats of [await scored(node(2), 10), await scored(node(1), 10, reorder)]) {
      const judged = stats.filter((s) => s.positions >= MIN_POSITIONS);
      expect(flaggedAfter(judged)).toBe(3);
      expect(flaggedAfter(stats)).toBeLessThanOrEqual(10);
    }
  }, 120_000);

  it("one keeping the honest answer's words in another order is flagged at its 3rd answer", async () => {
    for (const size of [4, 8]) {
      const stats = await scored(node(1), 12, reorderWords(size));
      expect(stats.every((s) => s.positions >= MIN_POSITIONS)).toBe(true);
      expect(flaggedAfter(stats)).toBe(3);
    }
  }, 120_000);

  it('the honest model with 20 % noise on its weights (a heavier quantisation) is flagged within 8 answers', async () => {
    const noisy = await scored(node(1, 0.2), 12);
    const at = flaggedAfter(noisy);
    expect(at).toBeDefined();
    expect(at!).toBeGreaterThanOrEqual(3);
    expect(at!).toBeLessThanOrEqual(8);
  }, 120_000);

  it('two scorers of one model agree with each other about any answer; two of different models do not', async () => {
    // The pairs confirmations are judged by (verify/scores.ts): both scorers found an answer
    // foreign, and only scorers of one model together convict its node.
    const pairs = async (writer: Gguf, a: Gguf, b: Gguf): Promise<boolean[]> => {
      const out: boolean[] = [];
      for (const job of jobs.slice(0, 30)) {
        const answer = (await writer.chat(job)).content;
        const [x, y] = [(await a.score(job, answer)).positions, (await b.score(job, answer)).positions];
        if (Math.min(x.length, y.length) >= MIN_POSITIONS) out.push(scorersAgree(x, y));
      }
      return out;
    };
    const count = (v: boolean[]) => ({ answers: v.length, agreed: v.filter(Boolean).length });
    const other = node(1, 0.015);
    // One model's scorers (1 % and 1.5 % noise; 20 % and 21 %), of an honest answer, another model's and a noised copy's.
    for (const [writer, a, b] of [
      [node(1), checker, other],
      [node(2), checker, other],
      [node(1, 0.2), checker, other],
      [node(1), node(1, 0.2), node(1, 0.21)],
    ] as const) {
      const v = count(await pairs(writer, a, b));
      expect(v.answers).toBeGreaterThan(20);
      expect(v.agreed).toBe(v.answers);
    }
    // Two models' scorers, of the honest answer (two impostors) and of a third model's (an honest scorer beside an impostor).
    for (const [writer, a, b] of [
      [node(1), node(2), node(3)],
      [node(3), checker, node(2)],
    ] as const) {
      const v = count(await pairs(writer, a, b));
      expect(v.answers).toBeGreaterThan(20);
      expect(v.agreed).toBe(0);
    }
  });
});

describe('two scorers agreeing', () => {
  const at = (logprobs: number[]) => logprobs.map((logprob) => ({ rank: 2, logprob, top_logprob: 0 }));
  const curve = Array.from({ length: 20 }, (_, i) => -1 - (i % 5));
  it('is not vouched for by a flat list, one at the floor, or too few positions', () => {
    expect(scorersAgree(at(curve), at(curve.map((v) => v - 0.1)))).toBe(true);
    // A scorer reporting every token far outside its alternatives: nothing to correlate.
    expect(scorersAgree(at(curve.map(() => -50)), at(curve))).toBe(false);
    expect(scorersAgree(at(curve.map(() => -3)), at(curve))).toBe(false);
    expect(scorersAgree(at(curve.slice(0, MIN_POSITIONS - 1)), at(curve.slice(0, MIN_POSITIONS - 1)))).toBe(false);
  });
});

describe('the sequential test', () => {
  const answer = (positions: number, k: number): AnswerStats =>
    answerStats(
      Array.from({ length: positions }, (_, i) =>
        i < k ? { rank: 50, logprob: -20, top_logprob: -0.1 } : { rank: 1, logprob: -0.1, top_logprob: -0.1 },
      ),
      0,
    );
  it('no single answer, however bad, and no two flag a node; three do; honest answers between wash evidence out', () => {
    const worst = answer(64, 64);
    expect(worst.evidence).toBe(ANSWER_CAP);
    expect(flaggedAfter([worst])).toBeUndefined();
    expect(flaggedAfter([worst, worst])).toBeUndefined();
    expect(flaggedAfter([worst, worst, worst])).toBe(3);
    expect(flaggedAfter([worst, worst, answer(32, 0), answer(32, 0), worst])).toBeUndefined();
  });
  it('a short answer counts for nothing; an empty one too', () => {
    expect(answer(5, 5).evidence).toBe(0);
    expect(answerStats([], 0)).toMatchObject({ positions: 0, evidence: 0 });
  });
});
