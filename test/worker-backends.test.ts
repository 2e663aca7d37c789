// The worker's backends (src/worker/backends.ts) against real HTTP servers speaking each
// backend's documented wire (test/helpers/backends.ts): which server `--backend openai` finds,
// whether each continues an answer another node began, and that a continuation is asked for
// the way each documents — the fakes continue only when asked so, so asking wrongly fails here.
import { afterAll, describe, expect, it } from 'vitest';
import { createBackend } from '../src/worker/backends.js';
import type { BackendKind } from '../src/worker/options.js';
import { answerOf, piecesOf, startFakeBackend, words, type FakeBackend, type FakeKind, type FakeOptions } from './helpers/backends.js';
import { until } from './helpers/wait.js';

const MODEL = 'llama3.2:latest';
const job = {
  model: MODEL,
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'tell me about the river' },
  ],
  max_output: 64,
  temperature: 0,
  seed: 7,
};
const whole = answerOf(MODEL, job.messages);
// What an earlier node streamed before it failed: the first three pieces.
const prefix = piecesOf(whole).slice(0, 3).join('');
const rest = whole.slice(prefix.length);
const promptWords = job.messages.map((m) => words(m.content)).reduce((a, c) => a + c, 0);

const fakes: FakeBackend[] = [];
const fake = async (kind: FakeKind, opts: FakeOptions = {}) => {
  const b = await startFakeBackend(kind, [MODEL], opts);
  fakes.push(b);
  return b;
};
afterAll(async () => {
  for (const b of fakes) await b.close();
});

async function detected(kind: BackendKind, b: FakeBackend, mayContinue = true) {
  const backend = createBackend(kind, b.url, mayContinue);
  await backend.detect();
  return backend;
}

describe('continuing an answer on each backend', () => {
  const cases: { name: string; fake: FakeKind; flag: BackendKind; found: string; sent: (r: Record<string, unknown>) => void }[] = [
    { name: 'Ollama', fake: 'ollama', flag: 'ollama', found: 'Ollama 0.11.10', sent: (r) => expect(r).not.toHaveProperty('continue_final_message') },
    {
      name: 'vLLM (found by --backend openai)',
      fake: 'vllm',
      flag: 'openai',
      found: 'vLLM 0.10.2',
      sent: (r) => {
        expect(r).toMatchObject({ continue_final_message: true, add_generation_prompt: false });
        expect(r).not.toHaveProperty('echo');
      },
    },
    {
      name: "llama.cpp's server (found by --backend openai)",
      fake: 'llamacpp',
      flag: 'openai',
      found: "llama.cpp's server",
      sent: (r) => expect(r).not.toHaveProperty('continue_final_message'),
    },
  ];
  for (const c of cases) {
    it(`${c.name}: continues from the prefix, streams only what follows, counts only its own tokens`, async () => {
      const b = await fake(c.fake);
      const backend = await detected(c.flag, b);
      expect(backend.name).toBe(c.found);
      expect(backend.continues).toBe(true);
      const deltas: string[] = [];
      const streamed = await backend.chat({ ...job, prefix }, (d) => deltas.push(d));
      expect(deltas.join('')).toBe(rest);
      expect(streamed).toEqual({
        content: rest,
        usage: { prompt_tokens: promptWords + words(prefix), completion_tokens: words(rest) },
        finish_reason: 'stop',
      });
      const plain = await backend.chat({ ...job, prefix });
      expect(plain.content).toBe(rest);
      // Asked with the conversation and the beginning as an open assistant turn.
      for (const r of b.requests) {
        expect(r.messages).toEqual([...job.messages, { role: 'assistant', content: prefix }]);
        c.sent(r);
      }
      // Without a prefix, the whole answer.
      expect((await backend.chat(job)).content).toBe(whole);
    });
  }

  it('the fakes are strict: vLLM continues only with its switch, and refuses it beside add_generation_prompt', async () => {
    const b = await fake('vllm');
    const post = async (extra: Record<string, unknown>) => {
      const res = await fetch(`${b.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [...job.messages, { role: 'assistant', content: prefix }], ...extra }),
      });
      return {
        status: res.status,
        content: res.status === 200 ? ((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content : '',
      };
    };
    expect((await post({})).content).not.toBe(rest);
    expect((await post({ continue_final_message: true })).status).toBe(400);
    expect(await post({ continue_final_message: true, add_generation_prompt: false })).toEqual({ status: 200, content: rest });
    expect(await post({ continue_final_message: true, add_generation_prompt: false, echo: true })).toEqual({ status: 200, content: whole });
  });

  it('backends that cannot continue are found so', async () => {
    const old = await detected('ollama', await fake('ollama', { version: '0.2.7' }));
    expect([old.name, old.continues]).toEqual(['Ollama 0.2.7', false]);
    const oldVllm = await detected('openai', await fake('vllm', { version: '0.6.2' }));
    expect([oldVllm.name, oldVllm.continues]).toEqual(['vLLM 0.6.2', false]);
    const noPrefill = await fake('llamacpp');
    noPrefill.prefillAssistant = false;
    const llama = await detected('openai', noPrefill);
    expect([llama.name, llama.continues]).toEqual(["llama.cpp's server (--no-prefill-assistant)", false]);
    const other = await detected('openai', await fake('openai'));
    expect([other.name, other.continues]).toEqual(['an OpenAI-compatible server', false]);
    // --continue off: none continues, whatever it is.
    for (const kind of ['ollama', 'vllm', 'llamacpp'] as const) {
      const b = await detected(kind === 'ollama' ? 'ollama' : 'openai', await fake(kind), false);
      expect(b.continues).toBe(false);
    }
  });

  it('--backend vllm and --backend llamacpp are taken at their word', async () => {
    for (const kind of ['vllm', 'llamacpp'] as const) {
      const b = await fake(kind);
      const backend = await detected(kind, b);
      expect(backend.continues).toBe(true);
      expect((await backend.chat({ ...job, prefix })).content).toBe(rest);
    }
  });

  it('an answer cut off mid-stream is an error, not a short answer', async () => {
    for (const kind of ['ollama', 'vllm'] as const) {
      const b = await fake(kind);
      b.failAfter = 2;
      const backend = await detected(kind === 'ollama' ? 'ollama' : 'openai', b);
      const deltas: string[] = [];
      await expect(backend.chat(job, (d) => deltas.push(d))).rejects.toThrow();
      expect(deltas.join('')).toBe(piecesOf(whole).slice(0, 2).join(''));
    }
  });

  it('a fake lets an answer go on when resume() came before the answer reached its pause (a test resumes once it saw the last piece)', async () => {
    const b = await fake('ollama');
    const backend = await detected('ollama', b);
    b.answer = () => 'two words';
    // Paused after its last piece, before its end; each piece is followed by half a second of
    // generation, so the client has the last piece, and resumes, before the answer gets there.
    b.pauseAfter = 2;
    b.delayMs = 1_000;
    let text = '';
    let ended = false;
    const answer = backend.chat(job, (d) => {
      text += d;
      if (text === 'two words') b.resume();
    });
    void answer.finally(() => (ended = true)).catch(() => undefined);
    await until('the answer to end', () => ended);
    expect((await answer).content).toBe('two words');
    expect(b.paused).toBe(1);
  });
});
