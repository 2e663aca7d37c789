// What a job asks of a node: the seed system's job_data fields (openapi.json, GetJobResponse),
// as stored in jobs.request, and (ours) the OpenAI chat parameters beyond them (issue 28,
// docs/openai.md) with the capabilities they need of the node.
import { randomInt } from 'node:crypto';
import type { WireToken } from '../validation/answer-tokens.js';

/** A message as the seed system's workers read it: role and text. */
export interface PlainMessage {
  role: string;
  content: string;
}

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
  /** A score check (issue 31, src/verify/scores.ts): the audited answer, to score instead of generating (needs `score`). */
  score?: { answer: string; tokens?: WireToken[] };
}

export interface JobRequest {
  messages: PlainMessage[];
  /** Most tokens to generate; 0: the node's default. */
  max_output: number;
  temperature: number;
  /** Ours: the sampling seed every node that runs the job (or a copy of it) gets. Absent in jobs older than it. */
  seed?: number;
  /** Ours: a client streams the answer, so a worker may send partial output (POST /worker/job_progress). */
  stream?: boolean;
  /** Ours: the OpenAI parameters beyond the seed's fields (/v1 jobs). Sent only to nodes that declared capabilities. */
  params?: ChatParams;
  /** Ours: the capabilities the job needs (jobs/capabilities.ts bits); absent or 0: a plain job. */
  needs?: number;
  /** Ours: what the front door that took the job keeps with it (the Responses API's stored response); never sent to nodes (routes/worker/get-job.ts picks job_data's fields). */
  front?: object;
}

/** A seed for a job whose user gave none. */
export const randomSeed = (): number => randomInt(2 ** 31 - 1);
