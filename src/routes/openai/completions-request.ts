// The body of POST /v1/completions (OpenAI's legacy text completions), read as OpenAI reads it
// and carried as a job like a chat completion's (docs/openai.md, "Text completions"): the
// prompt goes raw to a node that declared the `completions` capability for the model
// (jobs/capabilities.ts), in `params.prompt`; the job's `messages` hold it as one user turn,
// since the seed's job_data needs them (the seed's worker never gets such a job). An array of
// prompts (the legacy batch eval harnesses send) is a job per prompt, answered as one choice
// each, in the prompts' order; streamed, only one prompt (the choices would interleave from
// different nodes). Fields the network cannot honour are refused by name
// (`unsupported_parameter`), never dropped.
import { CAPABILITIES } from '../../jobs/capabilities.js';
import type { ChatParams } from '../../jobs/request.js';
import { invalidRequest } from './errors.js';
import { given, isObject, number, refuseFields, requestBody, samplingParams, storableDeep, streamFields, userField } from './chat-params.js';
import { OPENAI_DEFAULT_TEMPERATURE, seedOf, type ChatRequest } from './request.js';

/** OpenAI's completions fields the network cannot honour, refused when given other than as their no-op value. */
const REFUSED: Readonly<Record<string, (v: unknown) => boolean>> = Object.freeze({
  logit_bias: (v) => !(isObject(v) && Object.keys(v).length === 0),
  // Any number asks for logprobs (0: the chosen tokens' own, OpenAI's reference says), which no node returns for text completions.
  logprobs: () => true,
  echo: (v) => v !== false,
  suffix: (v) => v !== '',
  best_of: (v) => v !== 1,
});

/** Prompts in one request at most (each is a job). */
export const MAX_PROMPTS = 64;

/** The prompts: a string, or an array of strings. Token arrays are refused: the nodes take text. */
function prompts(v: unknown, stream: boolean): string[] {
  if (!given(v)) throw invalidRequest("Missing required parameter: 'prompt'.", 'prompt', 'missing_required_parameter');
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || !list.every((p) => typeof p === 'string')) {
    throw invalidRequest(
      "Invalid type for 'prompt': expected a string or an array of strings (token arrays are not supported).",
      'prompt',
      'invalid_type',
    );
  }
  if (list.length === 0) throw invalidRequest("Invalid 'prompt': empty array. Expected an array with minimum length 1.", 'prompt', 'empty_array');
  if (list.length > MAX_PROMPTS)
    throw invalidRequest(`Invalid 'prompt': at most ${MAX_PROMPTS} prompts per request (each is a job).`, 'prompt', 'array_above_max_length');
  if (list.length > 1 && stream) {
    throw invalidRequest(
      'Unsupported parameter: a streamed request takes one prompt (each prompt is a job on its own node); send the prompts as separate requests, or without stream.',
      'prompt',
      'unsupported_parameter',
    );
  }
  storableDeep(list, 'prompt');
  return list;
}

/** A completions request as jobs, one per prompt: ChatRequest's shape, so that each is submitted and awaited as a chat completion is. */
export function parseCompletionsRequest(raw: unknown, limits: { defaultTimeout: number; maxTimeout: number }): ChatRequest[] {
  const body = requestBody(raw);
  const texts = prompts(body.prompt, body.stream === true);
  const n = number(body, 'n', 1, 128, true);
  if (n !== undefined && n !== 1)
    throw invalidRequest('Only n = 1 is supported: each completion is one job on one node.', 'n', 'unsupported_parameter');
  refuseFields(body, REFUSED);
  userField(body);
  const { stream, includeUsage } = streamFields(body);
  const shared: ChatParams = {};
  const needs = CAPABILITIES.completions | samplingParams(body, shared);
  const timeout = number(body, 'request_timeout_time', 1, limits.maxTimeout, false);
  const maxTokens = number(body, 'max_tokens', 1, 10_000_000, true) ?? 0;
  const seed = seedOf(body);
  return texts.map((text) => ({
    model: body.model,
    messages: [{ role: 'user', content: text }],
    // OpenAI's default for completions is 16 tokens; 0 lets the node's default apply, as for chat without max_tokens.
    maxTokens,
    temperature: shared.temperature ?? OPENAI_DEFAULT_TEMPERATURE,
    params: { ...shared, prompt: text },
    needs,
    seed,
    stream,
    includeUsage,
    timeoutSeconds: timeout ?? limits.defaultTimeout,
  }));
}
