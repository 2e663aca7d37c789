// The OpenAI chat parameters a job carries beyond the seed system's fields, as job_data.params
// brings them to a worker (openapi.json JobData.params, docs/openai.md, issue 28): one set of
// types for the coordinator (src/jobs/request.ts) and the worker (src/worker/chat-wire.ts), which
// knows the coordinator by its HTTP wire only and so shares with it only this base layer.
import type { WireToken } from './answer-tokens.js';

/** An OpenAI tool call, as in an assistant message or an answer. */
export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** An OpenAI chat message whole: an assistant's tool calls, a tool's answer. */
export interface ChatMessage {
  role: string;
  content: string | null;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
  name?: string;
}

/**
 * The OpenAI chat parameters a job carries beyond the seed system's fields, as the client gave
 * them. `temperature` is here only when the client set it: absent, the model's own default
 * applies (the seed's job_data.temperature, which its wire requires, is then 1, OpenAI's
 * default). `messages` is here only when some message is more than role and text.
 */
export interface ChatParams {
  temperature?: number;
  top_p?: number;
  stop?: string[];
  presence_penalty?: number;
  frequency_penalty?: number;
  response_format?:
    | { type: 'json_object' }
    | { type: 'json_schema'; json_schema: { name: string; schema?: Record<string, unknown>; strict?: boolean | null; description?: string } };
  logprobs?: boolean;
  top_logprobs?: number;
  tools?: { type: 'function'; function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean | null } }[];
  tool_choice?: 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } };
  parallel_tool_calls?: boolean;
  messages?: ChatMessage[];
  /** POST /v1/completions: the raw prompt, run as it is (no chat template); the job's `messages` then hold it as one user turn. */
  prompt?: string;
  /** POST /v1/embeddings: the texts to embed, one vector each (the job's `messages` hold them as user turns). */
  input?: string[];
  /** A score check (issue 31, src/verify/scores.ts; the worker's side: src/worker/score-job.ts): the audited answer, to score instead of generating (needs `score`). */
  score?: { answer: string; tokens?: WireToken[] };
}
