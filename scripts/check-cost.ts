// What a score check costs a node against a generated answer, on the gguf backend
// (docs/verification.md, "Checks priced by their work"): for each of N jobs, the time to
// generate an answer (temperature 0.8, up to --tokens tokens) and the time to score that same
// answer with its tokens forced (one prefill of prompt + answer, the score check's work), both on
// one llama.cpp context of the tiny models (scripts/tiny-gguf.ts), or of the GGUF file given
// with --file. Prints the time per token of each and their ratio: the fraction of a generated
// answer's rate a scored token is worth (VERIFY_CHECK_PRICE).
//
//   npx tsx scripts/check-cost.ts [--jobs 40] [--tokens 256] [--vocab chars|wordpiece] [--threads 1] [--file MODEL.gguf]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Gguf } from '../src/worker/gguf.js';
import { writeTinyGguf, type TinyVocab } from './tiny-gguf.js';

const { values } = parseArgs({
  options: {
    jobs: { type: 'string', default: '40' },
    tokens: { type: 'string', default: '256' },
    vocab: { type: 'string', default: 'chars' },
    threads: { type: 'string', default: '1' },
    file: { type: 'string' },
  },
});
const jobs = Number(values.jobs);
const max = Number(values.tokens);
const dir = mkdtempSync(join(tmpdir(), 'ins-check-cost-'));
try {
  const file = values.file ?? writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 1, vocab: values.vocab as TinyVocab });
  const backend = new Gguf(file, 'tiny', false, 1, Number(values.threads));
  await backend.detect();
  let genMs = 0;
  let genTokens = 0;
  let scoreMs = 0;
  let scored = 0;
  const words = ['river', 'stone', 'light', 'green', 'cloud', 'north', 'paper', 'glass'];
  for (let i = 0; i < jobs + 2; i++) {
    const job = {
      model: 'tiny',
      messages: [
        { role: 'user', content: `Tell me about the ${words[i % words.length]} and the ${words[(i * 3 + 1) % words.length]}, number ${i}.` },
      ],
      max_output: max,
      temperature: 0.8,
      seed: i,
    };
    const t0 = performance.now();
    const answer = await backend.chat(job);
    const t1 = performance.now();
    const score = await backend.score(job, answer.content, answer.tokens);
    const t2 = performance.now();
    if (i < 2) continue; // warm-up
    genMs += t1 - t0;
    genTokens += answer.usage?.completion_tokens ?? 0;
    scoreMs += t2 - t1;
    scored += score.positions.length;
  }
  const gen = genMs / genTokens;
  const sc = scoreMs / scored;
  console.log(
    JSON.stringify({
      jobs,
      model: values.file ?? `tiny (${values.vocab})`,
      threads: Number(values.threads),
      generated_tokens: genTokens,
      generate_ms_per_token: Number(gen.toFixed(4)),
      scored_tokens: scored,
      score_ms_per_token: Number(sc.toFixed(4)),
      ratio: Number((sc / gen).toFixed(4)),
    }),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
