// Whether two answers to the same request agree, by the kind of answer the request asks for
// (issue 28, docs/verification.md "Answers compared by their kind"); verdict() (rules.ts) uses
// it for every pair it weighs.
// - text (plain chat, text completions, logprobs jobs): the words, as they always were (agreeing,
//   below): free generations differ a little across hardware even at temperature 0;
// - tools: two answers that both call tools agree when they call the same functions with the
//   same arguments, compared as parsed JSON (key order and whitespace aside) and in any order
//   (parallel calls come in no fixed order); two that both answer in text are compared as text;
//   one that calls tools where the other answers in text disagrees;
// - JSON (response_format json_object / json_schema): parsed, compared as values — objects by
//   their keys (in any order), arrays in order, numbers within a relative 1e-6 (float printing
//   noise: 0.1 vs 0.10000000000000001, a last digit rounded otherwise), short strings after
//   whitespace and case folding, and strings of EXACT_WORDS words or more as free text (they
//   are generations like any other). An answer that does not parse, is not an object where the
//   schema says so, or misses the schema's required keys (at every level the schema describes
//   by `properties`) is wrong: it agrees with nothing, not even an answer as wrong as itself;
// - embeddings: the same number of vectors, each of the same dimension with a cosine similarity
//   of at least MIN_COSINE. The same model on other hardware or batching moves a vector by float
//   noise (cosine above 0.999 in practice); another model, or a much heavier quantisation of it,
//   lands well below 0.99, and an unrelated vector near 0. A wrong dimension is another model.
import { endianness } from 'node:os';
import { normalise, similarity } from './text.js';
import type { ChatParams } from '../jobs/request.js';

/** What a request's answers are compared as. */
export type AnswerKind = { kind: 'text' } | { kind: 'tools' } | { kind: 'json'; schema?: Record<string, unknown> } | { kind: 'embeddings' };

/** An answer as the audit reads it: the message's text, and its tool calls or vectors when it has them (as the node reported them). */
export interface AnswerParts {
  content: string;
  tool_calls?: unknown;
  embeddings?: unknown;
}

/** Embeddings agree at this cosine similarity or above (see above). */
export const MIN_COSINE = 0.99;
/** JSON string values of this many words or more are compared as free text. */
export const EXACT_WORDS = 8;
/** Numbers in JSON answers agree within this relative difference. */
const REL_EPSILON = 1e-6;

const LITTLE_ENDIAN = endianness() === 'LE';

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The kind of answer the job's parameters (jobs.request -> 'params') ask for; plain text when none. */
export function kindOf(params: ChatParams | null | undefined): AnswerKind {
  if (!isObject(params)) return { kind: 'text' };
  if (Array.isArray(params.input)) return { kind: 'embeddings' };
  const rf: unknown = params.response_format;
  if (isObject(rf) && (rf.type === 'json_object' || rf.type === 'json_schema')) {
    const schema = isObject(rf.json_schema) ? rf.json_schema.schema : undefined;
    return isObject(schema) ? { kind: 'json', schema } : { kind: 'json' };
  }
  if (Array.isArray(params.tools) && params.tools.length > 0) return { kind: 'tools' };
  return { kind: 'text' };
}

/** A job whose answer another node can reproduce, so that a copy of it is worth running: temperature 0, or embeddings (no sampling at all). */
export const deterministic = (request: { temperature: number; params?: ChatParams }): boolean =>
  request.temperature === 0 || Array.isArray(request.params?.input);

/** How far two answers agree: `same` and a score in [0, 1] for the evidence (word similarity, cosine, or 1/0). */
export interface Comparison {
  same: boolean;
  score: number;
}

export function compare(a: AnswerParts, b: AnswerParts, kind: AnswerKind, threshold: number): Comparison {
  switch (kind.kind) {
    case 'text':
      return text(a.content, b.content, threshold);
    case 'tools':
      return tools(a, b, threshold);
    // A job with tools and a response_format: an answer that calls tools is compared as calls.
    case 'json':
      return canonicalCalls(a.tool_calls) || canonicalCalls(b.tool_calls)
        ? tools(a, b, threshold)
        : json(a.content, b.content, kind.schema, threshold);
    case 'embeddings':
      return embeddings(a.embeddings, b.embeddings);
  }
}

/** Two texts agree: the same (whitespace and case aside), or similar enough. */
export const agreeing = (a: string, b: string, threshold: number): boolean => normalise(a) === normalise(b) || similarity(a, b) >= threshold;

const text = (a: string, b: string, threshold: number): Comparison => ({
  same: agreeing(a, b, threshold),
  score: Math.round(similarity(a, b) * 100) / 100,
});
const verdictOf = (same: boolean): Comparison => ({ same, score: same ? 1 : 0 });

// --- tools ---

/** An answer's tool calls as canonical strings (name and arguments), sorted; undefined when it calls none. */
export function canonicalCalls(calls: unknown): string[] | undefined {
  if (!Array.isArray(calls) || calls.length === 0) return undefined;
  return calls
    .map((c: unknown) => {
      const f = isObject(c) && isObject(c.function) ? c.function : {};
      const name = typeof f.name === 'string' ? f.name : '';
      // Arguments come as a JSON string (OpenAI's form) or, from some backends, as an object.
      const raw: unknown = f.arguments ?? {};
      let args = raw;
      if (typeof raw === 'string') {
        try {
          args = JSON.parse(raw);
        } catch {
          args = { unparsed: raw.trim() };
        }
      }
      return JSON.stringify([name, canonical(args)]);
    })
    .sort();
}

function tools(a: AnswerParts, b: AnswerParts, threshold: number): Comparison {
  const x = canonicalCalls(a.tool_calls);
  const y = canonicalCalls(b.tool_calls);
  if (!x && !y) return text(a.content, b.content, threshold);
  if (!x || !y) return verdictOf(false);
  return verdictOf(x.length === y.length && x.every((c, i) => c === y[i]));
}

/** The value with every object's keys sorted (for a stable JSON string). */
export function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (isObject(v))
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, canonical(v[k])]),
    );
  return v;
}

// --- JSON ---

/** The answer parsed, when it is JSON that meets the schema's shape (see above); undefined when it is wrong. */
export function parsedAnswer(content: string, schema?: Record<string, unknown>): { value: unknown } | undefined {
  let value: unknown;
  try {
    value = JSON.parse(content);
  } catch {
    return undefined;
  }
  return !schema || meets(value, schema) ? { value } : undefined;
}

/** The value has the schema's required keys wherever the schema describes an object (its type and `properties`), not a full validation. */
function meets(value: unknown, schema: Record<string, unknown>): boolean {
  const describesObject = schema.type === 'object' || isObject(schema.properties) || Array.isArray(schema.required);
  if (!describesObject) return true;
  if (!isObject(value)) return false;
  if (Array.isArray(schema.required) && !schema.required.every((k) => typeof k !== 'string' || Object.hasOwn(value, k))) return false;
  const props = isObject(schema.properties) ? schema.properties : {};
  return Object.entries(props).every(([k, sub]) => !Object.hasOwn(value, k) || !isObject(sub) || meets(value[k], sub));
}

function json(a: string, b: string, schema: Record<string, unknown> | undefined, threshold: number): Comparison {
  const x = parsedAnswer(a, schema);
  const y = parsedAnswer(b, schema);
  return verdictOf(x !== undefined && y !== undefined && sameValue(x.value, y.value, threshold));
}

export function sameValue(a: unknown, b: unknown, threshold: number): boolean {
  if (typeof a === 'number' && typeof b === 'number') return a === b || Math.abs(a - b) <= REL_EPSILON * Math.max(Math.abs(a), Math.abs(b));
  if (typeof a === 'string' && typeof b === 'string') {
    const long = Math.max(a.split(/\s+/).filter(Boolean).length, b.split(/\s+/).filter(Boolean).length) >= EXACT_WORDS;
    return long ? agreeing(a, b, threshold) : normalise(a) === normalise(b);
  }
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => sameValue(x, b[i], threshold));
  if (isObject(a) && isObject(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && sameValue(a[k], b[k], threshold));
  }
  return a === b;
}

// --- embeddings ---

/** A reported vector (base64 of little-endian float32s, jobs/answer.ts) as numbers; undefined when malformed. */
export function decodeVector(v: unknown): Float32Array | undefined {
  if (typeof v !== 'string') return undefined;
  const bytes = Buffer.from(v, 'base64');
  if (bytes.length === 0 || bytes.length % 4 !== 0) return undefined;
  // On a little-endian host (every one Node.js ships for but s390x) the bytes are the floats: one copy, no per-float read.
  if (LITTLE_ENDIAN) return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  const out = new Float32Array(bytes.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = bytes.readFloatLE(i * 4);
  return out;
}

export function cosine(a: Float32Array, b: Float32Array): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return na === 0 || nb === 0 ? (na === nb ? 1 : 0) : dot / Math.sqrt(na * nb);
}

function embeddings(a: unknown, b: unknown): Comparison {
  if (!Array.isArray(a) || !Array.isArray(b) || a.length === 0 || a.length !== b.length) return verdictOf(false);
  let least = 1;
  for (const [i, va] of a.entries()) {
    const x = decodeVector(va);
    const y = decodeVector(b[i]);
    if (!x || !y || x.length !== y.length) return verdictOf(false);
    least = Math.min(least, cosine(x, y));
  }
  return { same: least >= MIN_COSINE, score: Math.round(least * 10_000) / 10_000 };
}
