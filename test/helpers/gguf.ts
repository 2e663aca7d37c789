// Real tiny models for tests (scripts/tiny-gguf.ts): written once per test file into a
// temporary directory, by vocabulary and seed. Two seeds are two different models of one
// vocabulary; `noise` is the seed's model with its weights disturbed (a heavier quantisation of
// it); `vocab: 'wordpiece'` a vocabulary with many tokenizations per text.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeTinyGguf, type TinyModelOptions } from '../../scripts/tiny-gguf.js';
import { llamaRuntime } from '../../src/worker/gguf.js';

export interface TinyModels {
  /** The file of this model, written on first use. */
  file(opts: TinyModelOptions): string;
  remove(): void;
}

export function tinyModels(): TinyModels {
  const dir = mkdtempSync(join(tmpdir(), 'ins-gguf-'));
  const files = new Map<string, string>();
  return {
    file(opts) {
      const key = `${opts.vocab ?? 'chars'}-${opts.seed}-${opts.noise ?? 0}`;
      let f = files.get(key);
      if (!f) files.set(key, (f = writeTinyGguf(join(dir, `tiny-${key}.gguf`), opts)));
      return f;
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** The test process's one llama.cpp runtime: the gguf backend's own (src/worker/gguf.ts). */
export const sharedLlama = llamaRuntime;
