// An answer's tokens (issue 53; src/validation/answer-tokens.ts, docs/verification.md "Scoring
// the tokens a node generated"):
// - the wire form: a token is its text when its bytes are valid UTF-8 alone, else its bytes (a
//   character split across tokens, a lone byte); a list spells a text when its bytes are exactly
//   the text's UTF-8 bytes;
// - a GGUF vocabulary's bytes (SentencePiece and GPT-2 byte-level BPE), which the gguf backend
//   writes and maps tokens by (src/worker/gguf.ts);
// - the coordinator, on both databases, through the real app: a report whose tokens do not spell
//   its text (or come with tool calls) is refused with 400 and changes nothing (its lease runs on);
//   one whose tokens spell it is taken, the tokens kept in jobs.tokens and not shown to the
//   owner; the seed's report without tokens is taken as before; and a score check of that answer
//   carries the very tokens to its scorer (params.score.tokens), one of an answer without none;
// - `ins worker` whose report the tokens make larger than the body limit reports the answer
//   without them, rather than failing the job as too large.
import { afterEach, describe, expect, it } from 'vitest';
import type { VerifyConfig } from '../src/config-verify.js';
import { answerTokensOf, tokenBytes, tokensOf, wireToken } from '../src/validation/answer-tokens.js';
import { vocabularyBytes } from '../src/worker/gguf.js';
import { answerTokens } from '../src/worker/backend.js';
import { backends } from './helpers/db.js';
import { auditWaits } from './helpers/audits.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { totalPoints } from './helpers/state.js';
import { workerScores } from './helpers/scores.js';
import { startFakeBackend } from './helpers/backends.js';
import { startWorker, type InProcessWorker } from './helpers/worker.js';

const bytes = (s: string) => [...Buffer.from(s, 'utf8')];

describe('the token wire form', () => {
  it('is the text when the bytes are valid UTF-8 alone, else the bytes', () => {
    expect(wireToken(Buffer.from('▁river'.replace('▁', ' ')))).toBe(' river');
    expect(wireToken(Buffer.from('é'))).toBe('é');
    // "€" (E2 82 AC) split over two tokens: neither half is UTF-8 alone.
    const euro = Buffer.from('€');
    expect(wireToken(euro.subarray(0, 2))).toEqual([0xe2, 0x82]);
    expect(wireToken(euro.subarray(2))).toEqual([0xac]);
    expect(wireToken(Buffer.from([0xff]))).toEqual([0xff]);
    // A byte-order mark is the token's own text, not dropped.
    expect(wireToken(Buffer.from('\uFEFFa'))).toBe('\uFEFFa');
    for (const t of ['a', ' the', '日本', [0xe2, 0x82], [0xac]]) expect(wireToken(tokenBytes(t))).toEqual(t);
  });

  it('spells a text when the bytes are exactly its UTF-8 bytes', () => {
    expect(answerTokensOf(['H', 'é', [0xe2, 0x82], [0xac], ' x'], 'Hé€ x')).toEqual({ tokens: ['H', 'é', [0xe2, 0x82], [0xac], ' x'] });
    // The same bytes split otherwise spell the same text.
    expect(answerTokensOf([bytes('Hé€ x')], 'Hé€ x')).toHaveProperty('tokens');
    expect(answerTokensOf([], '')).toEqual({ tokens: [] });
    const refused = (v: unknown, text: string) => (answerTokensOf(v, text) as { error?: string }).error;
    expect(refused(['ab', 'c'], 'abd')).toMatch(/token 1 differs .* at byte 2/);
    expect(refused(['ab'], 'abc')).toMatch(/end at byte 2 of its 3/);
    expect(refused(['abc', 'd'], 'abc')).toMatch(/token 1 differs/);
    expect(refused(['b', 'a'], 'ab')).toMatch(/token 0 differs/);
    expect(refused([[0xe2, 0x82]], '€')).toMatch(/end at byte 2 of its 3/);
    expect(refused(['a', ''], 'a')).toMatch(/tokens\[1\] is neither/);
    expect(refused(['a', []], 'a')).toMatch(/tokens\[1\] is neither/);
    expect(refused([[256]], 'a')).toMatch(/tokens\[0\] is neither/);
    expect(refused([[1.5]], 'a')).toMatch(/tokens\[0\] is neither/);
    expect(refused([7], 'a')).toMatch(/tokens\[0\] is neither/);
    expect(refused('abc', 'abc')).toMatch(/must be a list/);
    expect(refused({ 0: 'a' }, 'a')).toMatch(/must be a list/);
    expect(tokensOf(['a', [0xac]])).toEqual(['a', [0xac]]);
    expect(tokensOf(['a', 3])).toBeUndefined();
    expect(tokensOf('a')).toBeUndefined();
  });

  it("takes a backend's logprobs entries as the answer's tokens only when they spell it", () => {
    const b = (...s: (string | number[])[]) => s.map((x) => (typeof x === 'string' ? Buffer.from(x) : Buffer.from(x)));
    expect(answerTokens(b('The', ' ri', 'ver', [0xe2, 0x82], [0xac]), 'The river€')).toEqual(['The', ' ri', 'ver', [0xe2, 0x82], [0xac]]);
    // An empty entry, and a stop token listed after the text, are left out.
    expect(answerTokens(b('a', '', 'b', '<|eot_id|>'), 'ab')).toEqual(['a', 'b']);
    expect(answerTokens(b('a', 'c'), 'ab')).toBeUndefined();
    expect(answerTokens(b('a', 'b', 'c', 'd'), 'ab')).toBeUndefined();
    expect(answerTokens([], '')).toBeUndefined();
  });

  it("reads a GGUF vocabulary's bytes: SentencePiece's ▁ and byte tokens, GPT-2's byte-level characters", () => {
    // SentencePiece: <unk>, <s> (control), the byte token of "A", "A" itself, "▁the", a byte token of a non-ASCII byte.
    const spm = vocabularyBytes('llama', ['<unk>', '<s>', '<0x41>', 'A', '▁the', '<0xE2>'], [2, 3, 6, 1, 1, 6])!;
    expect(spm.bytes).toEqual([undefined, undefined, Buffer.from('A'), Buffer.from('A'), Buffer.from(' the'), Buffer.from([0xe2])]);
    // Two ids of one byte string: the normal token is the one a reported "A" maps to.
    expect(spm.ids.get('A')).toBe(3);
    expect(spm.ids.get(' the')).toBe(4);
    expect(spm.ids.get('\xe2')).toBe(5);
    // GPT-2: "Ġ" is a space, "Ċ" a newline, "Ã©" the two bytes of "é".
    const gpt2 = vocabularyBytes('gpt2', ['Ġthe', 'Ċ', 'Ã©', '<|endoftext|>'], [1, 1, 1, 3])!;
    expect(gpt2.bytes).toEqual([Buffer.from(' the'), Buffer.from('\n'), Buffer.from('é'), undefined]);
    expect(vocabularyBytes('bert', ['a'], [1])).toBeUndefined();
    expect(vocabularyBytes('llama', undefined, undefined)).toBeUndefined();
  });
});

const MODEL = 'tokens-model';
type ScoreJob = Job & { params?: { score?: { answer: string; tokens?: unknown } } };

describe.each(backends)('answer tokens at the coordinator on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());
  const { q, until } = auditWaits(() => t.db);

  const start = async (verify: Partial<VerifyConfig> = { enabled: false }) => {
    t = await startApp(backend, { verify });
    return new TestUser(t.app, await t.addUser());
  };
  const send = (w: TestWorker, job: Job, result: Record<string, unknown>, status: 'success' | 'error' = 'success') =>
    w.post('/worker/update_result', { job_id: job.job_id, api_key: job.api_key, model_name: job.model, status, result });
  const stored = async (id: string) =>
    (await q<{ state: string; tokens: unknown; result: unknown }>('t_job', 'SELECT state, tokens, result FROM jobs WHERE id = $1::uuid', [id]))[0]!;
  const recorded = async (id: string) =>
    (await q<{ n: number }>('t_recorded', 'SELECT count(*)::int AS n FROM job_results WHERE job_id = $1::text', [id]))[0]!.n;

  it('refuses tokens that do not spell the text (400, nothing changes); takes those that do, kept apart from the answer', async () => {
    const user = await start();
    const w = await new TestWorker(t.app, 'node', await t.addNode('node')).start([MODEL]);
    const id = await user.submit(MODEL, 'tell me');
    const job = (await w.getJob())!;
    const text = 'Hé€ the river';
    const message = { role: 'assistant', content: text };
    const points = await totalPoints(t.db);
    for (const [tokens, why] of [
      [['Hé€ the rive'], /end at byte 15 of its 16/],
      [['Hé€', ' the', ' river', '!'], /token 3 differs/],
      [['Hé', [0xe2, 0x82], [0xad], ' the river'], /token 2 differs/],
      [['Hé€', '', ' the river'], /tokens\[1\] is neither/],
      [['Hé€', [300], ' the river'], /tokens\[1\] is neither/],
      ['Hé€ the river', /must be a list/],
      [null, /must be a list/],
    ] as const) {
      const res = await send(w, job, { message, tokens });
      expect(res.statusCode, JSON.stringify(tokens)).toBe(400);
      expect((res.json() as { detail: string }).detail).toMatch(why);
      expect((res.json() as { detail: string }).detail).toMatch(/nothing was recorded, and the lease runs on/);
    }
    const calls = await send(w, job, {
      message: { ...message, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
      tokens: [text],
    });
    expect(calls.statusCode).toBe(400);
    expect((calls.json() as { detail: string }).detail).toMatch(/plain text answer only/);
    // Nothing changed: the lease is open, nothing recorded or credited.
    expect(await stored(id)).toMatchObject({ state: 'leased', tokens: null, result: null });
    expect(await recorded(id)).toBe(0);
    expect(await totalPoints(t.db)).toBe(points);
    const tokens = ['H', 'é', [0xe2, 0x82], [0xac], ' the', ' ri', 'ver'];
    const ok = await send(w, job, { message, tokens });
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toMatchObject({ status: 'success', points: 1, replayed: false });
    expect(await stored(id)).toMatchObject({ state: 'done', tokens, result: { message } });
    // The owner reads the answer as before, no tokens in it.
    const res = await user.result(id);
    expect(res.statusCode).toBe(200);
    expect(res.body).not.toContain('tokens');
    expect(res.json()).toMatchObject({ result: { message } });
    // The same report again is a replay (the tokens are not part of the result compared).
    expect((await send(w, job, { message, tokens })).json()).toMatchObject({ replayed: true, points: 0 });
  });

  it("takes the seed's report without tokens as before, and an error report's tokens are ignored", async () => {
    const user = await start();
    const w = await new TestWorker(t.app, 'seed', await t.addNode('seed')).start([MODEL]);
    const a = await user.submit(MODEL, 'one');
    const job = (await w.getJob())!;
    const res = await w.report(job, 'plain answer');
    expect(res.json()).toMatchObject({ status: 'success', points: 1, replayed: false });
    expect(await stored(a)).toMatchObject({ state: 'done', tokens: null, result: { message: { role: 'assistant', content: 'plain answer' } } });
    const b = await user.submit(MODEL, 'two');
    const job2 = (await w.getJob())!;
    const err = await send(w, job2, { message: 'backend failed', tokens: 'not even a list' }, 'error');
    expect(err.statusCode).toBe(200);
    expect(await stored(b)).toMatchObject({ tokens: null });
  });

  it('an answer whose tokens make its report too large (413) is reported without them', { timeout: 60_000 }, async () => {
    t = await startApp(backend, { bodyLimit: 8 * 1024, verify: { enabled: false } });
    const user = new TestUser(t.app, await t.addUser());
    const fake = await startFakeBackend('vllm', [MODEL]);
    let w: InProcessWorker | undefined;
    try {
      const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
      w = await startWorker({ server: url, node: 'big', key: await t.addNode('big'), backend: 'vllm', backendUrl: fake.url });
      // About 5 KB of text: its report fits in 8 KB, not with its tokens (one a word) beside it.
      const long = Array.from({ length: 900 }, (_, i) => `w${i}`).join(' ');
      const small = await user.submit(MODEL, 'short question');
      const big = await user.submit(MODEL, long);
      await until('both answered', async () => (await stored(small)).state === 'done' && (await stored(big)).state === 'done');
      expect(((await stored(small)).tokens as string[]).join('')).toBe(`echo(${MODEL}): short question`);
      expect(await stored(big)).toMatchObject({ state: 'done', tokens: null, result: { message: { content: `echo(${MODEL}): ${long}` } } });
    } finally {
      await w?.stop();
      await fake.close();
    }
  });

  it("gives a score check of an answer the node's tokens (params.score.tokens), and none for an answer without", { timeout: 60_000 }, async () => {
    const user = await start({ enabled: true, share: 1, probeInterval: 0, maxTokensPerSecond: 0 });
    const node = await new TestWorker(t.app, 'node', await t.addNode('node')).start([MODEL]);
    const scorer = await new TestWorker(t.app, 'scorer', await t.addNode('scorer')).start([MODEL]);
    expect(
      (await scorer.post('/worker/update_models', { node_url: 'scorer', models: [MODEL], capabilities: { [MODEL]: ['score'] } }, true)).statusCode,
    ).toBe(200);
    const tokens = ['The', ' ri', 'ver', ' é', [0xe2, 0x82], [0xac]];
    const text = 'The river é€';
    await user.submit(MODEL, 'tell me about rivers', { temperature: 0.8, seed: 3 });
    const job = (await node.getJob())!;
    expect((await send(node, job, { message: { role: 'assistant', content: text }, tokens })).statusCode).toBe(200);
    let check: ScoreJob | null = null;
    await until('the score check', async () => (check = (await scorer.getJob()) as ScoreJob | null) !== null);
    expect(check!.params?.score).toEqual({ answer: text, tokens });
    expect((await send(scorer, check!, { message: { role: 'assistant', content: '' }, scores: workerScores(false, 20) })).statusCode).toBe(200);
    await user.submit(MODEL, 'and about stones', { temperature: 0.8, seed: 4 });
    const job2 = (await node.getJob())!;
    expect((await node.report(job2, 'stones are old')).statusCode).toBe(200);
    let check2: ScoreJob | null = null;
    await until('the second score check', async () => (check2 = (await scorer.getJob()) as ScoreJob | null) !== null);
    expect(check2!.params?.score).toEqual({ answer: 'stones are old' });
  });
});
