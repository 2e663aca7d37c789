// The inference backends a worker runs jobs on, by their own wire formats: Ollama (ollama.ts)
// and OpenAI-compatible servers — vLLM, llama.cpp's server, LM Studio… (openai-compatible.ts);
// or a GGUF file run in this process (gguf.ts, loaded only when chosen).
// What they share, and what continuing an answer means: backend.ts.
import type { BackendKind } from './options.js';
import type { Backend } from './backend.js';
import { Gguf } from './gguf.js';
import { Ollama } from './ollama.js';
import { OpenAICompatible } from './openai-compatible.js';

export { BackendError, type Backend, type BackendAnswer, type BackendJob } from './backend.js';

/**
 * mayContinue: false (--continue off) keeps the worker from continuing answers whatever the backend. gguf: the file, the name it serves, jobs at once.
 * quantization: --quantization, what an OpenAI-compatible server runs (such servers do not say).
 */
export function createBackend(
  kind: BackendKind,
  url: string,
  mayContinue = true,
  gguf?: { file: string; name: string; concurrency: number; threads?: number },
  quantization?: string,
): Backend {
  if (kind === 'gguf') {
    if (!gguf) throw new Error('--backend gguf needs a model file and a name');
    return new Gguf(gguf.file, gguf.name, mayContinue, gguf.concurrency, gguf.threads);
  }
  if (kind === 'ollama') return new Ollama(url, mayContinue);
  return new OpenAICompatible(url, kind === 'openai' ? undefined : kind, mayContinue, quantization);
}
