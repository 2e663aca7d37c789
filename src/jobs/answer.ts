// What a worker's result becomes for the user: real workers send `{"message": "text"}` or
// `{"message": {"role", "content"}}`; users always read `{"message": {"role", "content"}}`.
// Ours (issue 28, docs/openai.md): an answer may also carry the message's `tool_calls`,
// `logprobs` in OpenAI's shape (`{"content": [...]}`) and the backend's `finish_reason`; they
// are kept only when well formed, and only when present (a plain answer keeps the seed's shape).
// An embeddings job's answer (ours, POST /v1/embeddings) is `result.embeddings`: one vector per
// input, each base64 of little-endian float32s (OpenAI's `encoding_format: "base64"`: a quarter of
// the JSON floats' size, so a batch fits the report's body limit), beside an empty message.
// A request's own error (an error report whose `result.error.type` is "invalid_request_error")
// is read by requestErrorOf.
// Usage (ours): `prompt_tokens` and `completion_tokens`, from the report's `usage` or
// `result.usage`, kept when they are whole numbers from 0 to MAX_TOKENS (what PostgreSQL's
// integer holds: the auditor computes with them). A success that counts none is charged and shown
// an estimate from the text's length instead (estimateTokens, `estimated: true`).
import { randomUUID } from 'node:crypto';
import type { ToolCall } from './request.js';

export interface Answer {
  message: { role: string; content: string; tool_calls?: ToolCall[] };
  /** OpenAI's choice.logprobs: `{content: [{token, logprob, bytes, top_logprobs}]}`. */
  logprobs?: { content: unknown[] };
  /** The backend's reason to stop, when it said "length" or "tool_calls". */
  finish_reason?: 'stop' | 'length' | 'tool_calls';
  /** An embeddings job's vectors, one per input: each OpenAI's base64 form (little-endian float32s). */
  embeddings?: string[];
  /** A score check's scores (issue 31, src/verify/scores.ts): parallel arrays, one entry per scored position. */
  scores?: Scores;
}
export interface Scores {
  method: 'prefill' | 'replay';
  unscored: number;
  rank: number[];
  logprob: number[];
  top_logprob: number[];
  gap: number[];
}
/** estimated: the node counted no tokens (the seed's workers count none); the counts are the service's estimate (estimateTokens). */
export interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  estimated?: true;
}

/** A request's own error, as the worker reported it and /v1 answers it (400). */
export interface RequestError {
  type: 'invalid_request_error';
  code: string | null;
  message: string;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A vector as an embeddings report carries it: base64 of little-endian float32s (a whole number of them, at least one). */
const isVector = (v: unknown): boolean =>
  typeof v === 'string' && v.length > 0 && v.length % 4 === 0 && /^[A-Za-z0-9+/]+={0,2}$/.test(v) && Buffer.from(v, 'base64').length % 4 === 0;

function toolCallsOf(v: unknown): ToolCall[] | undefined {
  if (!Array.isArray(v)) return undefined;
  const calls = v.flatMap((c): ToolCall[] => {
    if (!isObject(c) || !isObject(c.function) || typeof c.function.name !== 'string') return [];
    const args = c.function.arguments;
    return [
      {
        id: typeof c.id === 'string' && c.id ? c.id : `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`,
        type: 'function',
        function: { name: c.function.name, arguments: typeof args === 'string' ? args : JSON.stringify(args ?? {}) },
      },
    ];
  });
  return calls.length ? calls : undefined;
}

/**
 * Whether a success report carries an answer: `result.message` as the text, or as a message
 * with its text (`content`) or its tool calls. A success without one (`{"message": 12345}`, no
 * message at all) is refused rather than handed to its user as an empty answer.
 */
export function hasAnswerMessage(result: Record<string, unknown>): boolean {
  const m = result.message;
  return typeof m === 'string' || (isObject(m) && (typeof m.content === 'string' || Array.isArray(m.tool_calls)));
}

export function answerOf(result: Record<string, unknown>): Answer {
  const m = result.message;
  let answer: Answer;
  if (typeof m === 'string') {
    answer = { message: { role: 'assistant', content: m } };
  } else if (isObject(m)) {
    const { role, content } = m as { role?: unknown; content?: unknown };
    answer = { message: { role: typeof role === 'string' ? role : 'assistant', content: typeof content === 'string' ? content : '' } };
    const calls = toolCallsOf(m.tool_calls);
    if (calls) answer.message.tool_calls = calls;
  } else {
    return { message: { role: 'assistant', content: '' } };
  }
  // Beside the message, in either of its forms (`{"message": ""}` is the seed's own).
  if (isObject(result.logprobs) && Array.isArray(result.logprobs.content)) answer.logprobs = { content: result.logprobs.content };
  if (result.finish_reason === 'stop' || result.finish_reason === 'length' || result.finish_reason === 'tool_calls')
    answer.finish_reason = result.finish_reason;
  if (Array.isArray(result.embeddings) && result.embeddings.length > 0 && result.embeddings.every(isVector))
    answer.embeddings = result.embeddings as string[];
  const scores = scoresOf(result.scores);
  if (scores) answer.scores = scores;
  return answer;
}

/** Most positions a score check may report (workers score at most 512: src/worker/gguf.ts, score-http.ts). */
const MAX_SCORED = 4_096;
const numbers = (v: unknown, n: number): v is number[] =>
  Array.isArray(v) && v.length === n && v.every((x) => typeof x === 'number' && Number.isFinite(x));

/** result.scores when well formed: aligned arrays of finite numbers, ranks whole and ≥ 1 (src/worker/score-job.ts). */
function scoresOf(v: unknown): Scores | undefined {
  if (!isObject(v) || (v.method !== 'prefill' && v.method !== 'replay') || !Array.isArray(v.rank) || v.rank.length > MAX_SCORED) return undefined;
  const n = v.rank.length;
  if (
    !numbers(v.rank, n) ||
    !v.rank.every((r) => Number.isInteger(r) && r >= 1) ||
    !numbers(v.logprob, n) ||
    !numbers(v.top_logprob, n) ||
    !numbers(v.gap, n)
  )
    return undefined;
  return { method: v.method, unscored: count(v.unscored) ?? 0, rank: v.rank, logprob: v.logprob, top_logprob: v.top_logprob, gap: v.gap };
}

const MAX_ERROR = 2_000;

/** An error report's claim that the job's own request was at fault: `result.error` as {type: "invalid_request_error", code, message}. */
/**
 * What a user is told of a node's request error (issue 53): a fixed message by its code — never
 * the node's own words (up to MAX_ERROR characters of whatever it chose, shown as the 400's
 * message), which stay in jobs.error for the operator (`ins job show`) — and the code only when it
 * is OpenAI's `context_length_exceeded`.
 */
export const REQUEST_ERROR_MESSAGES = Object.freeze({
  context_length_exceeded: 'The request is longer than the context of the node that took it: shorten the messages, or ask for fewer output tokens.',
  // `ins worker`'s own (src/worker/worker.ts): an answer larger than the coordinator takes.
  answer_too_large: 'The answer is larger than the coordinator takes from a node (BODY_LIMIT): ask for less at once (fewer or shorter inputs).',
});
/** The message of any other code, or none. */
export const OTHER_REQUEST_ERROR =
  "The node that took the request refused it as invalid (its schema, tools or parameters, as the model's backend reads them).";

/** The user's view of a request error: the fixed message and code (REQUEST_ERROR_MESSAGES; another code is not passed on). */
export function publicRequestError(code: string | null): { message: string; code: string | null } {
  return code !== null && Object.hasOwn(REQUEST_ERROR_MESSAGES, code)
    ? { message: REQUEST_ERROR_MESSAGES[code as keyof typeof REQUEST_ERROR_MESSAGES], code }
    : { message: OTHER_REQUEST_ERROR, code: null };
}

export function requestErrorOf(status: string, result: Record<string, unknown>): RequestError | undefined {
  const e = result.error;
  if (status !== 'error' || !isObject(e) || e.type !== 'invalid_request_error') return undefined;
  const message =
    typeof e.message === 'string' && e.message
      ? e.message
      : typeof result.message === 'string' && result.message
        ? result.message
        : 'the backend refused the request';
  return {
    type: 'invalid_request_error',
    code: typeof e.code === 'string' && e.code.length <= 64 ? e.code : null,
    message: message.slice(0, MAX_ERROR),
  };
}

/** The most tokens a report may count (openapi.json UpdateResultRequest.usage). */
export const MAX_TOKENS = 2_147_483_647;

const count = (v: unknown): number | undefined => (typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= MAX_TOKENS ? v : undefined);

export function usageOf(...sources: unknown[]): Usage | null {
  for (const s of sources) {
    if (typeof s !== 'object' || s === null) continue;
    const u = s as Record<string, unknown>;
    const out: Usage = {};
    const prompt = count(u.prompt_tokens);
    const completion = count(u.completion_tokens);
    if (prompt !== undefined) out.prompt_tokens = prompt;
    if (completion !== undefined) out.completion_tokens = completion;
    if (prompt !== undefined || completion !== undefined) return out;
  }
  return null;
}

/**
 * Tokens a text is estimated at when its node counted none: a quarter of its UTF-8 bytes, rounded
 * up (about four characters a token in English text, as OpenAI's own rule of thumb has it; a
 * script of several bytes a character counts more, as its tokenizers do). Used in place of a
 * count, never beside one: docs/coordinator.md, "Usage charged".
 */
export function estimateTokens(text: string): number {
  return Math.ceil(Buffer.byteLength(text, 'utf8') / 4);
}

/** The texts an answer's output tokens are of: its text, and each tool call's name and arguments. */
const outputTexts = (answer: Answer): string[] => [
  answer.message.content,
  ...(answer.message.tool_calls ?? []).map((c) => c.function.name + c.function.arguments),
];

/** The output tokens an answer is estimated at: its text and its tool calls' names and arguments. */
export function estimateAnswerTokens(answer: Answer): number {
  return outputTexts(answer).reduce((n, text) => n + estimateTokens(text), 0);
}

/**
 * Output tokens a node may count beyond one per UTF-8 byte of what it delivered, for the answer and
 * again for each tool call: the stop token, a chat template's marks around a call, which decode
 * to no text the answer keeps.
 */
export const COMPLETION_ALLOWANCE = 16;

/**
 * The most output tokens a success may charge (sql/complete.ts): one per UTF-8 byte of its answer
 * (its text, its tool calls' names and arguments, as estimateAnswerTokens reads them), plus
 * COMPLETION_ALLOWANCE for the text and for each tool call — every token a tokenizer emits for
 * text decodes to at least one byte. Before, a node that wrote 8 tokens and
 * counted max_output charged its user for all of them (an outside probe: 520 characters in 65
 * answers charged 16,640 tokens). Tokens spent on text the app never gets (a model's hidden
 * reasoning) are not charged. A continued answer's text includes the prefix other leases wrote,
 * so its bound is looser by that much; theirs are counted at most a token per byte they streamed.
 */
export function mostCompletionTokens(answer: Answer): number {
  return outputTexts(answer).reduce((n, text) => n + Buffer.byteLength(text, 'utf8') + COMPLETION_ALLOWANCE, 0);
}
