// The answer's tokens through OpenAI-faced backends (issue 53; src/worker/openai-compatible.ts,
// ollama.ts, score-http.ts), on a word-piece vocabulary (scripts/tiny-gguf.ts) served by the
// vLLM- and Ollama-speaking test servers of test/helpers/logprob-backends.ts (a real tiny model
// behind each, run by llama.cpp in this process):
// - `ins worker --backend vllm`'s chat asks for logprobs the job did not ask for and reads each
//   entry's bytes: streamed and not, the tokens are the very tokens the model generated (the gguf
//   backend's own for the same model), and no logprobs reach an answer that did not ask for them;
//   Ollama's (≥ 0.12.11) likewise;
// - vLLM's scorer, given those tokens, scores exactly them (POST /v1/completions with a prompt of
//   token ids): an honest answer has no confident mismatch beyond P0, while the same answer
//   re-tokenized (the fallback) looks foreign;
// - `ins worker --backend openai` nodes (found to be vLLM) against the real app (embedded
//   database), every answer checked: three honest nodes collect 0 strikes over
//   OPENAI_WORDPIECE_JOBS jobs, their answers' tokens kept and scored; an impostor of the same
//   vocabulary is suspended by its 5th judged answer (one long enough to judge: MIN_POSITIONS).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Gguf } from '../src/worker/gguf.js';
import { createBackend } from '../src/worker/backends.js';
import type { Backend } from '../src/worker/backend.js';
import { tokenBytes } from '../src/validation/answer-tokens.js';
import { answerStats, H, MIN_POSITIONS, P0, P1, type AnswerStats } from '../src/verify/token-stats.js';
import { tinyModels } from './helpers/gguf.js';
import { startLogprobBackend, type LogprobBackend } from './helpers/logprob-backends.js';
import { seededPrompts } from './helpers/prompts.js';
import { HONEST_NODES, tokenNodes, WITH_IMPOSTOR } from './helpers/token-nodes.js';

const models = tinyModels();
const MODEL = 'tiny:wordpiece';
const JOBS = Number(process.env.OPENAI_WORDPIECE_JOBS ?? 60);
const ANSWERS = 30;
const wordpiece = (seed: number, noise = 0) => models.file({ seed, noise, vocab: 'wordpiece' });
const servers: LogprobBackend[] = [];
const serve = async (kind: 'vllm' | 'ollama', seed: number, noise = 0) => {
  const s = await startLogprobBackend(kind, wordpiece(seed, noise), MODEL);
  servers.push(s);
  return s;
};
afterAll(async () => {
  for (const s of servers.splice(0)) await s.close();
  models.remove();
});

const { prompt } = seededPrompts(20261203);
const spell = (tokens: readonly (string | number[])[]) => Buffer.concat(tokens.map(tokenBytes)).toString('utf8');

describe('tokens from OpenAI-faced backends, scored as generated', () => {
  let gguf: Gguf;
  let vllm: Backend;
  let checker: Backend;
  beforeAll(async () => {
    gguf = new Gguf(wordpiece(1), MODEL, true, 1, 1);
    vllm = createBackend('vllm', (await serve('vllm', 1)).url);
    checker = createBackend('vllm', (await serve('vllm', 1, 0.01)).url);
    await vllm.detect();
    await checker.detect();
  }, 60_000);

  it("vLLM's chat reports the tokens the model generated, streamed and not, with no logprobs in an answer that did not ask", {
    timeout: 120_000,
  }, async () => {
    for (let i = 0; i < 6; i++) {
      const job = { model: MODEL, max_output: 32, temperature: 0, messages: [{ role: 'user', content: prompt() }] };
      const own = await gguf.chat(job);
      const plain = await vllm.chat(job);
      const deltas: string[] = [];
      const streamed = await vllm.chat(job, (d) => deltas.push(d));
      expect(plain.content).toBe(own.content);
      expect(plain.tokens).toEqual(own.tokens);
      expect(streamed.tokens).toEqual(own.tokens);
      expect(deltas.join('')).toBe(own.content);
      expect(spell(plain.tokens!)).toBe(plain.content);
      expect(plain.logprobs).toBeUndefined();
      expect(streamed.logprobs).toBeUndefined();
    }
    // A job that asked for logprobs gets them as it asked, and the tokens too.
    const asked = await vllm.chat({
      model: MODEL,
      max_output: 8,
      temperature: 0,
      messages: [{ role: 'user', content: 'tell me' }],
      params: { logprobs: true, top_logprobs: 2 },
    });
    expect(asked.logprobs).toHaveLength(asked.tokens!.length);
    expect((asked.logprobs![0] as { top_logprobs: unknown[] }).top_logprobs).toHaveLength(2);
  });

  it("Ollama's chat (0.12.11) reports the tokens the model generated", { timeout: 60_000 }, async () => {
    const ollama = createBackend('ollama', (await serve('ollama', 1)).url);
    await ollama.detect();
    const job = { model: MODEL, max_output: 32, temperature: 0, messages: [{ role: 'user', content: 'tell me about the old city' }] };
    const own = await gguf.chat(job);
    const answer = await ollama.chat(job);
    expect(answer.content).toBe(own.content);
    expect(answer.tokens).toEqual(own.tokens);
    expect(answer.logprobs).toBeUndefined();
  });

  it(`vLLM's scorer forces the reported tokens: ${ANSWERS} honest answers within P0, re-tokenized far beyond`, { timeout: 300_000 }, async () => {
    const forced: AnswerStats[] = [];
    const retokenized: AnswerStats[] = [];
    for (let i = 0; i < ANSWERS; i++) {
      const job = { model: MODEL, max_output: 32, temperature: 0, messages: [{ role: 'user', content: prompt() }] };
      const a = await vllm.chat(job);
      const own = await checker.score!(job, a.content, a.tokens);
      expect(own.positions).toHaveLength(a.tokens!.length);
      forced.push(answerStats(own.positions, 0));
      retokenized.push(answerStats((await checker.score!(job, a.content)).positions, 0));
    }
    const rate = (s: AnswerStats[]) => s.reduce((n, a) => n + a.confidentMismatches, 0) / s.reduce((n, a) => n + a.positions, 0);
    process.stdout.write(
      `vLLM scorer, ${ANSWERS} honest word-piece answers: forced ${(100 * rate(forced)).toFixed(2)} % confident mismatches, re-tokenized ${(100 * rate(retokenized)).toFixed(2)} %\n`,
    );
    expect(rate(forced)).toBeLessThan(P0);
    expect(rate(retokenized)).toBeGreaterThan(P1 / 2);
  });
});

describe('token-level checks with `ins worker --backend openai` on a word-piece vocabulary (embedded database)', () => {
  const { start, submit, settle, submitInBatches, q, strikes, standing, pointsOf, pointsExact, doneWithTokens, evidenceTotals } = tokenNodes({
    model: MODEL,
    prompt,
    serve: async (n) => ({ backend: 'openai', backendUrl: `${(await serve('vllm', n.seed, n.noise ?? 0)).url}/v1` }),
  });

  it(`three honest vLLM nodes (two with 1 % weight noise), every answer checked: 0 strikes over ${JOBS} jobs`, { timeout: 1_800_000 }, async () => {
    const user = await start(HONEST_NODES);
    await submitInBatches(user, JOBS, 1_500_000);
    expect(await strikes()).toEqual([]);
    const jobs = await doneWithTokens();
    expect(jobs.tokens).toBe(jobs.done);
    const e = await evidenceTotals();
    expect(e.answers).toBeGreaterThanOrEqual(JOBS * 0.9);
    expect(e.mismatches / e.positions).toBeLessThan(P0);
    process.stdout.write(
      `vLLM word-piece honest run: ${JOBS} jobs; ${e.answers} answers judged, ${e.positions} positions, ${e.mismatches} confident mismatches\n`,
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
    // Judged answers until the flag, those too short to judge (fewer than MIN_POSITIONS) counting for nothing, as token-stats.ts has it.
    const checks = await q<{ positions: number; cusum: number }>(
      't_impostor_checks',
      `SELECT t.positions, t.cusum FROM token_checks t JOIN nodes n ON n.id = t.node_id
      WHERE n.name = 'impostor' ORDER BY t.at, t.cusum`,
    );
    const upTo = checks.findIndex((c) => c.cusum >= H - 1e-9);
    expect(upTo).toBeGreaterThanOrEqual(0);
    expect(checks.slice(0, upTo + 1).filter((c) => c.positions >= MIN_POSITIONS).length).toBeLessThanOrEqual(5);
    expect(await pointsOf('impostor')).toBe(0);
    await pointsExact();
  });
});
