// A front door's wire (docs/front-doors.md): how one job's events look on it. The core
// (front/run.ts) runs the job and calls these; each door (Chat Completions, text completions,
// Anthropic's Messages, OpenAI's Responses) is its request parser plus one of these.
import type { Capability } from '../../jobs/capabilities.js';
import type { OpenAIError } from '../openai/errors.js';
import type { ChatRequest } from '../openai/request.js';
import type { Outcome } from '../openai/completion.js';
import type { Event } from './event.js';

export type { Event };
export type Done = Extract<Outcome, { kind: 'done' }>;
export type Failed = Exclude<Outcome, { kind: 'done' }>;

/** Where a job waiting for its node stands (jobs/open-jobs.ts). */
export interface Standing {
  state: string;
  position: number | null;
  eta_seconds: number | null;
}

/**
 * The request's field that needs a capability no node has, for the 400 that names it; `what`
 * replaces "'param' needs" where the whole request is what needs it (text completions).
 */
export type ParamNeeding = (job: ChatRequest, cap: Capability) => { param: string; what?: string };

export interface Wire {
  /** Not streamed: the answer's body. */
  body(done: Done): unknown;
  /** Streamed: the events sent at once, before the job has a node. */
  begin(): Event[];
  /** Where the job stands while it waits (only when that changes). */
  waiting(standing: Standing): Event[];
  /** A piece of the answer's text, relayed as the node generates it. */
  text(piece: string): Event[];
  /** The end of a done job: `rest` the text not relayed yet, then tool calls, the finish, usage. */
  finish(done: Done, rest: string): Event[];
  /** The end of a stream that has begun but cannot end with the answer. */
  fail(error: OpenAIError): Event[];
}

/** The standing as the SSE comment every OpenAI stream here carries: `: queue {"state":"queued","position":3,"eta_seconds":12}`. */
export const queueComment = (s: Standing): Event => ({ comment: `queue ${JSON.stringify(s)}` });

/** The wire of a door that never streams (embeddings): its body alone. */
export const unstreamed = (body: Wire['body']): Wire => ({
  body,
  begin: () => [],
  waiting: () => [],
  text: () => [],
  finish: () => [],
  fail: () => [],
});
