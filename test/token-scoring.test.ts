// The scoring call per backend kind (src/worker/scoring.ts, score-http.ts, gguf.ts), with real
// tiny models (scripts/tiny-gguf.ts): an answer its own model wrote is its checker's top-1 almost
// everywhere; an impostor's (another seed), or the honest answer's characters in another order,
// is not. The same model gives the same ranks whether it scores in one pass in this process
// (gguf), over vLLM's wire in one prefill (prompt_logprobs), or over Ollama's by resync replay
// (logprobs of generated tokens only); an Ollama older than 0.12.11 cannot score.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Gguf } from '../src/worker/gguf.js';
import { createBackend } from '../src/worker/backends.js';
import type { AnswerScore } from '../src/worker/scoring.js';
import { tinyModels } from './helpers/gguf.js';
import { startLogprobBackend, type LogprobBackend } from './helpers/logprob-backends.js';

const models = tinyModels();
const MODEL = 'tiny';
const job = {
  model: MODEL,
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Tell me about the river.' },
  ],
  max_output: 40,
  temperature: 0,
};
const top1 = (s: AnswerScore) => s.positions.filter((p) => p.rank === 1).length / s.positions.length;

let honest: Gguf;
let impostor: Gguf;
let honestAnswer: string;
let impostorAnswer: string;
const servers: LogprobBackend[] = [];

beforeAll(async () => {
  honest = new Gguf(models.file({ seed: 1 }), MODEL, true, 1, 1);
  impostor = new Gguf(models.file({ seed: 2 }), MODEL, true, 1, 1);
  honestAnswer = (await honest.chat(job)).content;
  impostorAnswer = (await impostor.chat(job)).content;
});
afterAll(async () => {
  for (const s of servers) await s.close();
  models.remove();
});

// Same characters, another order: what a bag-of-words comparison cannot tell apart.
const shuffled = (s: string) => {
  const a = [...s];
  let x = 7;
  for (let i = a.length - 1; i > 0; i--) {
    x = (x * 1103515245 + 12345) % 2147483648;
    const j = x % (i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a.join('');
};

describe('gguf: one pass over prompt and answer', () => {
  it("ranks its own answer first almost everywhere; an impostor's and a reordered one mostly not", async () => {
    expect(honestAnswer.length).toBeGreaterThan(20);
    const own = await honest.score(job, honestAnswer);
    expect(own.method).toBe('prefill');
    expect(own.positions.length).toBe(honestAnswer.length);
    expect(top1(own)).toBeGreaterThanOrEqual(0.95);
    expect(own.positions[0]).toMatchObject({ token: honestAnswer[0], rank: 1 });
    expect(top1(await honest.score(job, impostorAnswer))).toBeLessThan(0.5);
    expect(top1(await honest.score(job, shuffled(honestAnswer)))).toBeLessThan(0.5);
  });
});

describe('vLLM: one prefill with prompt_logprobs', () => {
  it('gives the ranks the same model gives in process, asking the way vLLM documents', async () => {
    const server = await startLogprobBackend('vllm', models.file({ seed: 1 }), MODEL);
    servers.push(server);
    const b = createBackend('vllm', server.url);
    await b.detect();
    const wire = await b.score!(job, impostorAnswer);
    const local = await honest.score(job, impostorAnswer);
    expect(wire.method).toBe('prefill');
    expect(wire.positions.map((p) => p.rank)).toEqual(local.positions.map((p) => p.rank));
    expect(wire.positions.map((p) => p.token).join('')).toBe(impostorAnswer);
    const asked = server.requests.find((r) => r.path === '/v1/chat/completions')!.body;
    expect(asked).toMatchObject({ continue_final_message: true, add_generation_prompt: false, prompt_logprobs: 10 });
    expect(asked.messages).toEqual([...job.messages, { role: 'assistant', content: impostorAnswer }]);
    expect(top1(await b.score!(job, honestAnswer))).toBeGreaterThanOrEqual(0.95);
  });
});

describe('Ollama: resync replay on logprobs of generated tokens', () => {
  it("follows its own answer in one generation; at each place an impostor's leaves it, ranks that token and resyncs", async () => {
    const server = await startLogprobBackend('ollama', models.file({ seed: 1 }), MODEL);
    servers.push(server);
    const b = createBackend('ollama', server.url);
    await b.detect();
    const own = await b.score!(job, honestAnswer);
    expect(own.method).toBe('replay');
    expect(own.positions.map((p) => p.token).join('')).toBe(honestAnswer);
    expect(top1(own)).toBeGreaterThanOrEqual(0.95);
    const calls = server.requests.filter((r) => r.path === '/api/chat').length;
    const other = await b.score!(job, impostorAnswer);
    expect(top1(other)).toBeLessThan(0.5);
    // Each place it left the answer cost one more generation, from the answer's beginning.
    const replays = server.requests.filter((r) => r.path === '/api/chat').slice(calls);
    expect(replays.length).toBeGreaterThan(1);
    expect(replays[0]!.body).toMatchObject({ logprobs: true, top_logprobs: 10, options: { temperature: 0 } });
    const prefixes = replays.slice(1).map((r) => (r.body.messages as { role: string; content: string }[]).at(-1)!);
    for (const p of prefixes) expect(p.role === 'assistant' && impostorAnswer.startsWith(p.content)).toBe(true);
    // Where the token was among the top 10, its rank agrees with the one-pass score's.
    const local = await honest.score(job, impostorAnswer);
    const atPos = (s: AnswerScore) => {
      let at = 0;
      return new Map(
        s.positions.map((p) => {
          const r: [number, number] = [at, p.rank];
          at += p.token.length;
          return r;
        }),
      );
    };
    const l = atPos(local);
    for (const [pos, rank] of atPos(other)) if (rank <= 10) expect(l.get(pos)).toBe(rank);
  });

  it('before 0.12.11 it cannot score (the check falls back to comparing answers)', async () => {
    const server = await startLogprobBackend('ollama', models.file({ seed: 1 }), MODEL, { version: '0.12.10' });
    servers.push(server);
    const b = createBackend('ollama', server.url);
    await b.detect();
    expect(b.score).toBeUndefined();
  });
});
