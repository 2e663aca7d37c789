// What a worker asks of an inference backend (ollama.ts, openai-compatible.ts), and the HTTP
// call they share. A backend may be able to *continue* an answer another node began (a
// prefilled assistant turn: docs/worker.md says which backends and versions do, and how the
// worker finds out); one that cannot runs the job from the start.
import { http, type HttpResponse } from './http.js';
import type { ChatParams, ToolCall } from './chat-wire.js';
import type { AnswerScore, CompactScore } from './scoring.js';
import { isByteValues, wireToken, type WireToken } from '../validation/answer-tokens.js';

export interface BackendJob {
  model: string;
  messages: { role: string; content: string }[];
  max_output: number;
  temperature: number;
  seed?: number;
  /** The job's OpenAI parameters (job_data.params, docs/openai.md): each backend passes them on in its own form. */
  params?: ChatParams;
  /** The answer's beginning, written by an earlier attempt: continue it. Only given to a backend whose `continues` is true. */
  prefix?: string;
}

/** A model as the node runs it: its file's digest and its quantisation, each when known. */
export interface ModelBuild {
  digest?: string;
  quantization?: string;
}

export interface BackendAnswer {
  /** The text this call generated: with a prefix, only what follows it. */
  content: string;
  /** The backend's own counts: with a prefix, completion_tokens are the continuation's only. */
  usage: { prompt_tokens?: number; completion_tokens?: number } | null;
  /** The tool calls the answer makes (OpenAI's form: arguments a JSON string). */
  tool_calls?: ToolCall[];
  /** OpenAI's logprobs.content entries: {token, logprob, bytes, top_logprobs}. */
  logprobs?: unknown[];
  finish_reason?: 'stop' | 'length' | 'tool_calls';
  /** An embeddings job's vectors, one per input: base64 of little-endian float32s (vectorOf). */
  embeddings?: string[];
  /** A score check's scores (score-job.ts): reported as result.scores. */
  scores?: CompactScore;
  /**
   * Issue 53: the tokens the model generated for `content` (a plain text answer), as the backend
   * says them: reported as result.tokens, which a score check forces. Absent where it cannot say.
   */
  tokens?: WireToken[];
}

export interface Backend {
  /** What the backend is, as far as the worker found out (for the log), e.g. "vLLM 0.10.2". */
  readonly name: string;
  /** The URL its requests' paths are put after (for the log); none for a model run in the worker. */
  readonly url?: string;
  /** It continues a prefilled assistant turn (the way its API documents). */
  readonly continues: boolean;
  /** Finds out what the backend is and whether it continues answers; never throws (unknown: it does not). */
  detect(): Promise<void>;
  models(): Promise<string[]>;
  /** What the backend can do with the model beyond plain chat (jobs/capabilities.ts names); never throws. */
  capabilities(model: string): Promise<string[]>;
  /** Issue 31: what it runs for each model, where it says (digest, quantisation: update_models `builds`); never throws. */
  builds?(models: string[]): Promise<Record<string, ModelBuild>>;
  /** Issue 53: the context length (tokens) each model holds, where the backend says (update_models `limits`); never throws. */
  contextLengths?(models: string[]): Promise<Record<string, number>>;
  /** Runs the job; onDelta hears the text as it is generated (then the backend is asked to stream). */
  chat(job: BackendJob, onDelta?: (delta: string) => void, signal?: AbortSignal): Promise<BackendAnswer>;
  /**
   * Issue 31: how this backend's model ranks each token of `answer` to `job` (scoring.ts); absent
   * where the backend cannot say. Issue 53: `tokens`, the answer's tokens as its node generated
   * them: score exactly those (mapped to this model's own by their bytes) where the backend can.
   */
  score?(job: BackendJob, answer: string, tokens?: WireToken[]): Promise<AnswerScore>;
  /** Runs a text completion: `prompt` as it is, no chat template (POST /v1/completions jobs, job_data.params.prompt). */
  complete(job: BackendJob, prompt: string, onDelta?: (delta: string) => void, signal?: AbortSignal): Promise<BackendAnswer>;
  /** Embeds the texts (POST /v1/embeddings jobs, job_data.params.input): one vector each, in `embeddings`. */
  embed(job: BackendJob, input: string[], signal?: AbortSignal): Promise<BackendAnswer>;
}

/** The backend failed the call; `status` is its HTTP status when it answered one, `detail` its own error message. */
export class BackendError extends Error {
  constructor(
    message: string,
    readonly status?: number,
    readonly detail?: string,
  ) {
    super(message);
  }
}

/** The backend's own message in an error body: OpenAI's {error: {message}}, vLLM's {message}, Ollama's {error}. */
function backendMessage(text: string): string | undefined {
  try {
    const b = JSON.parse(text) as { error?: unknown; message?: unknown };
    if (typeof b.error === 'string') return b.error;
    if (typeof b.error === 'object' && b.error !== null && typeof (b.error as { message?: unknown }).message === 'string')
      return (b.error as { message: string }).message;
    if (typeof b.message === 'string') return b.message;
  } catch {
    // not JSON
  }
  return text.trim() || undefined;
}

/**
 * The backend refused the request itself (a 4xx about it: context length, invalid schema,
 * unknown tool format), not its own failure: the request's error, in OpenAI's form. 404 (model
 * not found) and 401/403 are the node's problems; 429 and 5xx, and no answer at all, too.
 */
export function requestErrorOf(err: unknown): { code: string | null; message: string } | undefined {
  if (!(err instanceof BackendError) || err.status === undefined) return undefined;
  if (![400, 413, 422].includes(err.status)) return undefined;
  const message = (err.detail ?? err.message).slice(0, 1_000);
  const context =
    /context (length|window)|maximum context|too many tokens|prompt is too long|exceeds? (the )?(model'?s? )?(maximum|max|context)/i.test(message);
  return { code: context ? 'context_length_exceeded' : null, message };
}

export async function call(url: string, init: Parameters<typeof http>[1], what: string): Promise<HttpResponse> {
  let res: HttpResponse;
  try {
    res = await http(url, init);
  } catch (err) {
    throw new BackendError(`${what}: ${(err as Error).message}`);
  }
  if (res.status >= 300) {
    const text = await res.text().catch(() => '');
    throw new BackendError(`${what}: HTTP ${res.status} ${text.slice(0, 200)}`, res.status, backendMessage(text)?.slice(0, 1_000));
  }
  return res;
}

const PROBE_TIMEOUT_MS = 10_000;

/** A GET or POST whose JSON answer is wanted, or undefined (not there, not JSON, unreachable, too slow): for detection. */
export async function probe(url: string, body?: unknown): Promise<unknown> {
  try {
    const signal = AbortSignal.timeout(PROBE_TIMEOUT_MS);
    const res = await http(
      url,
      body === undefined ? { signal } : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal },
    );
    const text = await res.text();
    return res.status === 200 ? (JSON.parse(text) as unknown) : undefined;
  } catch {
    return undefined;
  }
}

/** The backend's own end of an answer, when it says `stop` or `length` (the report carries it: docs/openai.md). */
export const finishOf = (reason: unknown): { finish_reason?: 'stop' | 'length' } =>
  reason === 'stop' || reason === 'length' ? { finish_reason: reason } : {};

export const count = (v: unknown): number | undefined => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined);

/** The messages with the answer's beginning as a last, open assistant turn. */
export const withPrefix = (job: BackendJob): BackendJob['messages'] => prefixed(job.messages, job.prefix);

/**
 * `messages` (the seed's, or the whole conversation of `params.messages` in a backend's form:
 * tool calls and tool answers kept) with the answer's beginning, if any, as a last, open
 * assistant turn: a continued job is the same conversation, not a flattened one.
 */
export const prefixed = <M>(messages: M[], prefix: string | undefined): (M | { role: 'assistant'; content: string })[] =>
  prefix ? [...messages, { role: 'assistant', content: prefix }] : messages;

/** `version` ("0.6.3", "0.6.3.post1", "v0.10.1rc1", "0.11.0+cu128") is at least `least` ("0.6.3"); false when it is not a version. */
export function versionAtLeast(version: string, least: string): boolean {
  const parse = (v: string) =>
    /^v?(\d+)\.(\d+)(?:\.(\d+))?/
      .exec(v.trim())
      ?.slice(1, 4)
      .map((n) => Number(n ?? 0));
  const a = parse(version);
  const b = parse(least)!;
  if (!a) return false;
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i]! > b[i]!;
  return true;
}

/**
 * The backend's vectors (arrays of numbers, one per input) as the report carries them: base64 of
 * little-endian float32s, OpenAI's `encoding_format: "base64"` (a quarter of the JSON's size).
 * A malformed answer (not one vector of finite numbers per input) is the backend's failure.
 */
export function vectorsOf(v: unknown, inputs: number, what: string): string[] {
  if (!Array.isArray(v) || v.length !== inputs) throw new BackendError(`${what}: ${Array.isArray(v) ? v.length : 0} vectors for ${inputs} inputs`);
  return v.map((vector: unknown) => {
    if (!Array.isArray(vector) || vector.length === 0 || !vector.every((x) => typeof x === 'number' && Number.isFinite(x)))
      throw new BackendError(`${what}: a vector is not a list of numbers`);
    const bytes = Buffer.alloc(vector.length * 4);
    (vector as number[]).forEach((x, i) => bytes.writeFloatLE(x, i * 4));
    return bytes.toString('base64');
  });
}

/** Issue 53: a logprobs entry's token (OpenAI's and Ollama's entries): its `bytes` where they are byte values, else its `token`'s UTF-8. */
export function pieceOf(e: unknown): Buffer[] {
  if (typeof e !== 'object' || e === null) return [];
  const { token, bytes } = e as { token?: unknown; bytes?: unknown };
  if (isByteValues(bytes)) return [Buffer.from(bytes)];
  return typeof token === 'string' ? [Buffer.from(token, 'utf8')] : [];
}

/**
 * The answer's tokens when the pieces spell `content` exactly (else none: the coordinator would
 * refuse them). An empty piece spells nothing and is left out; so is a last piece beyond the
 * text (a stop token a server lists with its name, which the text does not hold).
 */
export function answerTokens(pieces: readonly Buffer[], content: string): WireToken[] | undefined {
  const kept = pieces.filter((p) => p.length > 0);
  const text = Buffer.from(content, 'utf8');
  for (const n of [kept.length, kept.length - 1]) {
    if (n > 0 && Buffer.concat(kept.slice(0, n)).equals(text)) return kept.slice(0, n).map((p) => wireToken(p));
  }
  return undefined;
}
