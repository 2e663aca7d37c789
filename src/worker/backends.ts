// The inference backends a worker runs jobs on, by their own wire formats: Ollama (ollama.ts)
// and OpenAI-compatible servers — vLLM, llama.cpp's server, LM Studio… (openai-compatible.ts).
// What they share, and what continuing an answer means: backend.ts.
import type { BackendKind } from './options.js';
import type { Backend } from './backend.js';
import { Ollama } from './ollama.js';
import { OpenAICompatible } from './openai-compatible.js';

export { BackendError, type Backend, type BackendAnswer, type BackendJob } from './backend.js';

/** mayContinue: false (--continue off) keeps the worker from continuing answers whatever the backend. */
export function createBackend(kind: BackendKind, url: string, mayContinue = true): Backend {
  if (kind === 'ollama') return new Ollama(url, mayContinue);
  return new OpenAICompatible(url, kind === 'openai' ? undefined : kind, mayContinue);
}
