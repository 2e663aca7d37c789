// Token-level checks on a word-piece vocabulary (issue 53; scripts/tiny-gguf.ts `vocab:
// 'wordpiece'`, docs/verification.md "Scoring the tokens a node generated"): one text has many
// tokenizations, and a model's generated tokens are often not its tokenizer's own split of their
// text. Before, the scorer re-tokenized the answer's text, and honest nodes looked like
// impostors (the issue: one to two honest nodes of three suspended in 300 jobs).
// - Without the network, the same statistics (src/verify/token-stats.ts) over honest answers
//   scored both ways by the honest model with 1 % weight noise: re-tokenized (the fallback, still
//   used where a node reports no tokens), the confident-mismatch rate is far above P0 and the
//   honest node's test flags; scored on the tokens the node generated, it stays below P0 and
//   never flags. (This is the test that fails on the code before: it scores by re-tokenizing.)
// - `ins worker --backend gguf` nodes in this process against the real app (embedded database:
//   the report's tokens and their storage are tested on both databases in
//   test/answer-tokens.test.ts), every answer checked (VERIFY_SHARE=1), temperature 0: three
//   honest nodes (two with 1 % weight noise) collect 0 strikes over WORDPIECE_JOBS jobs, their
//   answers' tokens reported and scored; an impostor (another seed, the same vocabulary) is
//   suspended by its 5th judged answer.
import { afterAll, describe, expect, it } from 'vitest';
import { Gguf } from '../src/worker/gguf.js';
import { answerStats, freshTest, observe, P0, P1, type AnswerStats, type NodeTest } from '../src/verify/token-stats.js';
import { tinyModels } from './helpers/gguf.js';
import { seededPrompts } from './helpers/prompts.js';
import { HONEST_NODES, tokenNodes, WITH_IMPOSTOR } from './helpers/token-nodes.js';

const models = tinyModels();
afterAll(() => models.remove());
const MODEL = 'tiny:wordpiece';
/** Jobs of the honest run (WORDPIECE_JOBS=2000 for the run). */
const JOBS = Number(process.env.WORDPIECE_JOBS ?? 150);
/** Answers of the offline comparison. */
const ANSWERS = Number(process.env.WORDPIECE_ANSWERS ?? 60);
const wordpiece = (seed: number, noise = 0) => models.file({ seed, noise, vocab: 'wordpiece' });

const { prompt } = seededPrompts(20261202);

const sum = (s: AnswerStats[]) => ({
  positions: s.reduce((a, b) => a + b.positions, 0),
  mismatches: s.reduce((a, b) => a + b.confidentMismatches, 0),
});
const flaggedAfter = (stats: AnswerStats[]): number | undefined => {
  let t: NodeTest = freshTest();
  for (const [i, s] of stats.entries()) if ((t = observe(t, s)).flagged) return i + 1;
  return undefined;
};

describe('scoring an honest answer on a word-piece vocabulary: the tokens generated, or the text re-tokenized', () => {
  it(`${ANSWERS} honest answers: re-tokenized they look foreign and the node's test flags; on their own tokens, no mismatch beyond P0`, {
    timeout: 300_000,
  }, async () => {
    const writer = new Gguf(wordpiece(1), MODEL, true, 1, 1);
    const checker = new Gguf(wordpiece(1, 0.01), MODEL, true, 1, 1);
    const forced: AnswerStats[] = [];
    const retokenized: AnswerStats[] = [];
    let canonical = 0;
    for (let i = 0; i < ANSWERS; i++) {
      const job = { model: MODEL, max_output: 32, temperature: 0, messages: [{ role: 'user', content: prompt() }] };
      const a = await writer.chat(job);
      expect(a.tokens, 'the gguf backend reports its tokens').toBeDefined();
      const own = (await checker.score(job, a.content, a.tokens)).positions;
      const again = (await checker.score(job, a.content)).positions;
      // The same positions, token for token, exactly when the model's tokens were the tokenizer's own split.
      if (own.length === again.length && own.every((p, k) => p.token === again[k]!.token)) canonical++;
      forced.push(answerStats(own, 0));
      retokenized.push(answerStats(again, 0));
    }
    const f = sum(forced);
    const r = sum(retokenized);
    process.stdout.write(
      `word-piece, ${ANSWERS} honest answers: ${ANSWERS - canonical} not the tokenizer's own split; forced ${f.mismatches}/${f.positions} confident mismatches, flagged at ${flaggedAfter(forced) ?? 'never'}; re-tokenized ${r.mismatches}/${r.positions}, flagged at answer ${flaggedAfter(retokenized) ?? 'never'}\n`,
    );
    // The vocabulary does what it is for: most answers are not their tokenizer's own split.
    expect(canonical / ANSWERS).toBeLessThan(0.6);
    expect(f.positions).toBeGreaterThan(ANSWERS * 20);
    expect(f.mismatches / f.positions).toBeLessThan(P0);
    expect(flaggedAfter(forced)).toBeUndefined();
    // Re-tokenized, the honest answers look as foreign as the issue found: well past P1's middle, and flagged.
    expect(r.mismatches / r.positions).toBeGreaterThan(P1 / 2);
    expect(r.mismatches / r.positions).toBeGreaterThan(10 * Math.max(f.mismatches / f.positions, 0.005));
    expect(flaggedAfter(retokenized)).toBeDefined();
  });
});

describe("a token the scorer's vocabulary lacks", () => {
  it("is scored as the scorer's own pieces of its bytes: evidence, not a crash", { timeout: 120_000 }, async () => {
    const job = { model: MODEL, max_output: 32, temperature: 0, messages: [{ role: 'user', content: 'tell me about the old city' }] };
    const a = await new Gguf(wordpiece(1), MODEL, true, 1, 1).chat(job);
    expect(a.tokens!.some((t) => typeof t === 'string' && [...t].length > 1)).toBe(true);
    // A scorer of the character vocabulary has none of the pieces: each is scored as its characters.
    const chars = new Gguf(models.file({ seed: 1 }), MODEL, true, 1, 1);
    const s = await chars.score(job, a.content, a.tokens);
    expect(s.positions.map((p) => p.token).join('')).toBe(a.content);
    expect(s.positions).toHaveLength([...a.content].length);
    // Tokens no vocabulary writes alone (a character's bytes split, a byte of no character) are scored as byte tokens.
    const odd = await chars.score(job, 'a€', ['a', [0xe2, 0x82], [0xac]]);
    expect(odd.positions).toHaveLength(4);
    expect(odd.positions.every((p) => Number.isFinite(p.logprob) && p.rank >= 1)).toBe(true);
  });
});

describe('token-level checks on a word-piece vocabulary (gguf workers, embedded database)', () => {
  const { start, submit, settle, submitInBatches, strikes, standing, pointsOf, pointsExact, doneWithTokens, evidenceTotals } = tokenNodes({
    model: MODEL,
    prompt,
    serve: (n) => ({ backend: 'gguf', backendUrl: '', modelFile: wordpiece(n.seed, n.noise ?? 0), threads: 1 }),
  });

  it(`three honest nodes (two with 1 % weight noise), every answer checked on the tokens it was generated as: 0 strikes over ${JOBS} jobs`, {
    timeout: 3_600_000,
  }, async () => {
    const user = await start(HONEST_NODES);
    const began = Date.now();
    await submitInBatches(user, JOBS, 3_000_000);
    const seconds = (Date.now() - began) / 1000;
    expect(await strikes()).toEqual([]);
    for (const n of ['honest-1', 'honest-2', 'honest-3']) expect(await standing(n)).toBe('trusted');
    // Every done user job's answer came with its tokens, and each check scored them.
    const jobs = await doneWithTokens();
    expect(jobs.tokens).toBe(jobs.done);
    const e = await evidenceTotals();
    expect(e.answers).toBeGreaterThanOrEqual(JOBS * 0.9);
    expect(e.mismatches / e.positions).toBeLessThan(P0);
    process.stdout.write(
      `word-piece honest run: ${JOBS} jobs in ${seconds.toFixed(0)} s; ${e.answers} answers judged, ${e.positions} positions, ${e.mismatches} confident mismatches (${((100 * e.mismatches) / e.positions).toFixed(3)} %)\n`,
    );
    await pointsExact();
  });

  it('suspends an impostor of the same vocabulary by its 5th judged answer and strikes no honest node', { timeout: 600_000 }, async () => {
    const user = await start(WITH_IMPOSTOR);
    await submit(user, 30);
    await settle(550_000);
    expect(await standing('impostor')).toBe('suspended');
    const all = await strikes();
    expect(all.filter((s) => s.name !== 'impostor')).toEqual([]);
    const first = all.find((s) => s.name === 'impostor')!;
    expect(first.kind).toBe('impostor');
    expect(first.evidence.answers as number).toBeLessThanOrEqual(5);
    expect(await pointsOf('impostor')).toBe(0);
    expect(await standing('honest-2')).toBe('trusted');
    await pointsExact();
  });
});
