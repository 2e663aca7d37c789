// The measurements behind verification's defaults (docs/verification.md, "How the network checks answers"),
// as assertions, and the rules the auditor applies. Answers are the test backends' prose:
// 40–60 words a prompt, honest ones varying by a share of words changed at random.
import { describe, expect, it } from 'vitest';
import { distance, normalise, similarity, simhash, textHash, words } from '../src/verify/text.js';
import { outputTokens, tooFast, verdict } from '../src/verify/rules.js';
import { probePrompt } from '../src/verify/probes.js';
import { DEFAULT_VERIFY } from '../src/config-verify.js';
import { canned, jitter, noisy, prose } from './helpers/behaviours.js';

const N = 400;
const quantile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * q))]!;
const answers = (i: number) => prose('m', `prompt ${i}`);

describe('comparing answers', () => {
  it('normalises whitespace and case only', () => {
    expect(normalise('  Hello\n\tWORLD  again ')).toBe('hello world again');
    expect(textHash('Hello   world')).toBe(textHash('hello\nWorld'));
    expect(textHash('Hello world')).not.toBe(textHash('Hello world!'));
    expect(words("It's 42 — isn't it?")).toEqual(["it's", '42', "isn't", 'it']);
  });

  it(`VERIFY_SIMILARITY ${DEFAULT_VERIFY.similarity}: honest answers varying by 10 % of their words agree, unrelated answers do not`, () => {
    const honest = Array.from({ length: N }, (_, i) =>
      similarity(noisy(0.1)('m', [{ content: `prompt ${i}` }]), noisy(0.1)('m', [{ content: `prompt ${i}` }])),
    );
    const unrelated = Array.from({ length: N }, (_, i) => similarity(answers(i), answers(i + N)));
    const lazy = Array.from({ length: N }, (_, i) => similarity(canned('m', []), answers(i)));
    // Measured (N = 400): honest pairs p5 0.65, min 0.50; unrelated p95 0.35, max 0.41; canned vs real max ~0.2.
    expect(quantile(honest, 0.05)).toBeGreaterThan(DEFAULT_VERIFY.similarity + 0.05);
    expect(Math.max(...unrelated)).toBeLessThan(DEFAULT_VERIFY.similarity);
    expect(Math.max(...lazy)).toBeLessThan(DEFAULT_VERIFY.similarity / 2);
  });

  it('SimHash: a jittered copy is the same, a small edit is within 3 bits more often the longer the text, unrelated answers are far', () => {
    const appended = (text: string) => distance(simhash(text), simhash(`${text} indeed`));
    const short = Array.from({ length: N }, (_, i) => appended(answers(i)));
    const long = Array.from({ length: N }, (_, i) => appended(Array.from({ length: 8 }, (_, k) => answers(i * 8 + k)).join(' ')));
    const unrelated = Array.from({ length: N }, (_, i) => distance(simhash(answers(i)), simhash(answers(i + N))));
    for (let i = 0; i < 20; i++) expect(distance(simhash(answers(i)), simhash(jitter(answers(i))))).toBe(0);
    // Measured: one word added to 50 words, median 3 bits; to 400 words, p95 3; unrelated, min 19, median 32.
    expect(short.filter((d) => d <= 3).length / N).toBeGreaterThan(0.3);
    expect(long.filter((d) => d <= 3).length / N).toBeGreaterThan(0.9);
    expect(Math.min(...unrelated)).toBeGreaterThan(12);
    expect(quantile(unrelated, 0.5)).toBeGreaterThanOrEqual(28);
  });
});

describe("the auditor's rules", () => {
  const a = (id: string, content: string) => ({ id, nodeId: Number(id.slice(1)), content });
  it('two answers agree or call a third; three name the odd one, or nobody', () => {
    const right = prose('m', 'q');
    const wrong = prose('tiny', 'q');
    expect(verdict([a('n1', right), a('n2', jitter(right))], 0.5).kind).toBe('agree');
    expect(verdict([a('n1', right), a('n2', wrong)], 0.5).kind).toBe('third');
    expect(verdict([a('n1', right), a('n2', wrong), a('n3', right)], 0.5)).toMatchObject({
      kind: 'odd',
      odd: { id: 'n2' },
      majority: [{ id: 'n1' }, { id: 'n3' }],
    });
    expect(verdict([a('n1', wrong), a('n2', right), a('n3', right)], 0.5)).toMatchObject({ kind: 'odd', odd: { id: 'n1' } });
    expect(verdict([a('n1', right), a('n2', wrong), a('n3', prose('other', 'q'))], 0.5).kind).toBe('none');
  });

  it('counts tokens so that under-reporting hides nothing, and judges speed per model', () => {
    const text = 'x'.repeat(600);
    expect(outputTokens(text, 500)).toBe(500);
    expect(outputTokens(text, 1)).toBe(100);
    const config = { ...DEFAULT_VERIFY, maxTokensPerSecond: 100, modelMaxTokensPerSecond: { small: 1000 } };
    expect(tooFast('big', 200, 1, config)).toEqual({ rate: 200, cap: 100 });
    expect(tooFast('small', 200, 1, config)).toBeUndefined();
    expect(tooFast('big', 20, 0.001, config)).toBeUndefined(); // too short to judge
    expect(tooFast('big', 200, null, config)).toBeUndefined();
    expect(tooFast('big', 200, 0.1, { ...config, maxTokensPerSecond: 0 })).toBeUndefined();
  });

  it('makes up probe prompts afresh: no list to learn', () => {
    const prompts = new Set(Array.from({ length: 200 }, probePrompt));
    expect(prompts.size).toBeGreaterThan(190);
  });
});
