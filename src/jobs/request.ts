// What a job asks of a node: the seed system's job_data fields (openapi.json, GetJobResponse),
// as stored in jobs.request, and (ours) the OpenAI chat parameters beyond them (issue 28,
// docs/openai.md) with the capabilities they need of the node.
import { randomInt } from 'node:crypto';

/** A message as the seed system's workers read it: role and text. */
export interface PlainMessage {
  role: string;
  content: string;
}

export type { ChatMessage, ChatParams, ToolCall } from '../validation/chat-params.js';
import type { ChatParams } from '../validation/chat-params.js';

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
