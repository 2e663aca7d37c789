// What a node can do with a model beyond plain chat, and what a job needs of it (issue 28;
// docs/openai.md). One bit each, so that a session's per-model set and a job's needs compare in
// one SQL expression (`needs & ~caps = 0`, sql/lease.ts). A job that needs nothing is a plain
// job: any node of its model may take it, the seed system's worker too (it declares nothing).
// - sampling:    stop, top_p, presence_penalty, frequency_penalty;
// - tools:       tools, assistant tool_calls and `role: "tool"` messages (tool_choice "auto"/"none");
// - tool_choice: tool_choice "required" or a named function, parallel_tool_calls: false;
// - json:        response_format json_object and json_schema;
// - logprobs:    logprobs / top_logprobs;
// - completions: POST /v1/completions, a raw text prompt (Ollama /api/generate with raw, OpenAI /v1/completions);
// - embeddings:  POST /v1/embeddings (Ollama /api/embed, OpenAI /v1/embeddings);
// - score:       score checks (issue 31): re-score another node's answer token by token
//                (`params.score`, src/worker/score-job.ts; docs/verification.md "Token-level checks").
export const CAPABILITIES = Object.freeze({
  sampling: 1,
  tools: 2,
  tool_choice: 4,
  json: 8,
  logprobs: 16,
  completions: 32,
  embeddings: 64,
  score: 128,
} as const);
export type Capability = keyof typeof CAPABILITIES;
export const CAPABILITY_NAMES = Object.freeze(Object.keys(CAPABILITIES) as Capability[]);

/**
 * A node whose capabilities for a model are `embeddings` alone serves an embedding model (its
 * worker finds so: src/worker/ollama.ts): it answers no chat. As SQL, true when the caps
 * expression — NULL or 0 for a node that declared nothing, as the seed's worker — allows chat:
 * such a model is not offered for chat (GET /v1/models, POST /v1/chat/completions) nor probed.
 */
export const chatsSql = (caps: string): string => `coalesce(${caps}, 0) <> ${CAPABILITIES.embeddings}`;

export const isCapability = (s: string): s is Capability => Object.hasOwn(CAPABILITIES, s);

export function bitsOf(names: readonly string[]): number {
  let bits = 0;
  for (const n of names) if (isCapability(n)) bits |= CAPABILITIES[n];
  return bits;
}

export function namesOf(bits: number): Capability[] {
  return CAPABILITY_NAMES.filter((n) => (bits & CAPABILITIES[n]) !== 0);
}
