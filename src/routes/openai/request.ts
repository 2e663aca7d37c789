// The body of POST /v1/chat/completions, read the way OpenAI reads it: the seed's fields
// (model, messages, max_tokens or max_completion_tokens, temperature, seed, stream,
// stream_options.include_usage, Infera's request_timeout_time) and the parameters beyond them
// (openai/chat-params.ts: honoured, with the capability each needs, or refused by name);
// unknown fields are accepted and ignored. Messages may be tool calls and tools' answers (kept
// whole in the job's params); images, audio and files are refused. Text PostgreSQL cannot store
// (NUL, unpaired surrogates) is refused here as on every other route, before anything is queued.
import { isUnstorable, NUL_ERROR } from '../../validation/pydantic.js';
import { invalidRequest } from './errors.js';
import { given, isObject, number, parseChatParams, requestBody, storableDeep, streamFields } from './chat-params.js';
import type { ChatMessage, ChatParams, PlainMessage, ToolCall } from '../../jobs/request.js';
import { CAPABILITIES } from '../../jobs/capabilities.js';

export interface ChatRequest {
  model: string;
  messages: PlainMessage[];
  /** 0: the node's default. */
  maxTokens: number;
  /** The client's, or OpenAI's default when it gave none (params.temperature then absent: the model's default applies on nodes that can tell). */
  temperature: number;
  /** The parameters beyond the seed's fields, and the capabilities (bits) they need. */
  params: ChatParams;
  needs: number;
  /** OpenAI's `seed`, when given (the coordinator draws one otherwise). */
  seed: number | undefined;
  stream: boolean;
  includeUsage: boolean;
  timeoutSeconds: number;
  /** What a front door keeps in the job beside its request (jobs.request.front; never sent to nodes): the Responses API's stored conversation. */
  front?: object;
  /** Checked delivery asked by the request's header (front/delivery.ts; admit() sets it). */
  checked?: boolean;
}

/** OpenAI's default temperature. */
export const OPENAI_DEFAULT_TEMPERATURE = 1;
const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool']);
const MAX_MESSAGES = 1000;

const storable = (text: string, param: string): string => {
  if (isUnstorable(text)) throw invalidRequest(`Invalid '${param}': ${NUL_ERROR}.`, param, 'invalid_value');
  return text;
};

function content(v: unknown, i: number, role: string): string {
  if (typeof v === 'string') return storable(v, `messages[${i}].content`);
  if (Array.isArray(v)) {
    // Content parts: text is joined; anything else (images, audio, files) cannot be run here.
    return v
      .map((part, k) => {
        if (isObject(part) && part.type === 'text' && typeof part.text === 'string') return storable(part.text, `messages[${i}].content`);
        // An assistant's refusal, as OpenAI answered it earlier in the conversation: its words are that turn's text.
        if (role === 'assistant' && isObject(part) && part.type === 'refusal' && typeof part.refusal === 'string')
          return storable(part.refusal, `messages[${i}].content`);
        const kind = isObject(part) && typeof part.type === 'string' ? part.type : 'non-text';
        throw invalidRequest(
          `Content parts of type '${kind}' are not supported: the nodes run text models. Send text only.`,
          `messages[${i}].content[${k}]`,
          'unsupported_content',
        );
      })
      .join('');
  }
  throw invalidRequest(
    `Invalid type for 'messages[${i}].content': expected a string or an array of text parts.`,
    `messages[${i}].content`,
    'invalid_type',
  );
}

function toolCalls(v: unknown, i: number): ToolCall[] {
  const param = `messages[${i}].tool_calls`;
  if (!Array.isArray(v) || v.length === 0) throw invalidRequest(`Invalid '${param}': expected a non-empty array.`, param, 'invalid_type');
  return v.map((c, k) => {
    if (
      !isObject(c) ||
      c.type !== 'function' ||
      typeof c.id !== 'string' ||
      !isObject(c.function) ||
      typeof c.function.name !== 'string' ||
      typeof c.function.arguments !== 'string'
    ) {
      throw invalidRequest(
        `Invalid '${param}[${k}]': expected {id, type: 'function', function: {name, arguments}}.`,
        `${param}[${k}]`,
        'invalid_value',
      );
    }
    return { id: c.id, type: 'function', function: { name: c.function.name, arguments: c.function.arguments } };
  });
}

/** The messages as the seed's workers read them (role and text), and whole when some carry tool calls or are a tool's answer. */
function messages(v: unknown): { plain: PlainMessage[]; whole: ChatMessage[] | undefined } {
  if (!given(v)) throw invalidRequest("Missing required parameter: 'messages'.", 'messages', 'missing_required_parameter');
  if (!Array.isArray(v)) throw invalidRequest("Invalid type for 'messages': expected an array of objects.", 'messages', 'invalid_type');
  if (v.length === 0) throw invalidRequest("Invalid 'messages': empty array. Expected an array with minimum length 1.", 'messages', 'empty_array');
  if (v.length > MAX_MESSAGES) throw invalidRequest(`Invalid 'messages': at most ${MAX_MESSAGES} messages.`, 'messages', 'array_above_max_length');
  let tools = false;
  // Tool calls not yet answered by a tool message: OpenAI refuses a tool message that answers
  // none, and a conversation that goes on before every call of an assistant message is answered.
  let unanswered = new Set<string>();
  const answeredBefore = (i: number): void => {
    if (unanswered.size === 0) return;
    throw invalidRequest(
      `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${[...unanswered].join(', ')}`,
      `messages[${i}].role`,
    );
  };
  const whole = v.map((m, i): ChatMessage => {
    if (!isObject(m)) throw invalidRequest(`Invalid type for 'messages[${i}]': expected an object.`, `messages[${i}]`, 'invalid_type');
    // `name` (a participant's name) is accepted without effect (docs/openai.md), as a string.
    if (given(m.name) && typeof m.name !== 'string')
      throw invalidRequest(`Invalid type for 'messages[${i}].name': expected a string.`, `messages[${i}].name`, 'invalid_type');
    if (m.role === 'function' || given(m.function_call)) {
      throw invalidRequest(
        "Unsupported parameter: legacy function calling ('function' messages, function_call); use tools and tool_calls.",
        `messages[${i}]`,
        'unsupported_parameter',
      );
    }
    if (typeof m.role !== 'string' || !ROLES.has(m.role)) {
      throw invalidRequest(
        `Invalid value for 'messages[${i}].role': expected one of system, developer, user, assistant, tool.`,
        `messages[${i}].role`,
        'invalid_value',
      );
    }
    const role = m.role === 'developer' ? 'system' : m.role;
    if (role === 'tool') {
      if (typeof m.tool_call_id !== 'string' || m.tool_call_id.length === 0)
        throw invalidRequest(
          `Missing required parameter: 'messages[${i}].tool_call_id'.`,
          `messages[${i}].tool_call_id`,
          'missing_required_parameter',
        );
      storableDeep(m.tool_call_id, `messages[${i}].tool_call_id`);
      if (!unanswered.delete(m.tool_call_id)) {
        throw invalidRequest(
          "Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls'.",
          `messages[${i}].role`,
        );
      }
      tools = true;
      return { role, content: content(m.content, i, role), tool_call_id: m.tool_call_id };
    }
    answeredBefore(i);
    if (role === 'assistant' && given(m.tool_calls)) {
      const calls = toolCalls(m.tool_calls, i);
      storableDeep(calls, `messages[${i}].tool_calls`);
      unanswered = new Set(calls.map((c) => c.id));
      tools = true;
      return { role, content: given(m.content) ? content(m.content, i, role) : null, tool_calls: calls };
    }
    return { role, content: content(m.content, i, role) };
  });
  answeredBefore(v.length - 1);
  const plain = whole.map((m) => ({ role: m.role, content: m.content ?? '' }));
  return { plain, whole: tools ? whole : undefined };
}

export function parseChatRequest(raw: unknown, limits: { defaultTimeout: number; maxTimeout: number }): ChatRequest {
  const body = requestBody(raw);
  const n = number(body, 'n', 1, 128, true);
  if (n !== undefined && n !== 1)
    throw invalidRequest('Only n = 1 is supported: each completion is one job on one node.', 'n', 'unsupported_parameter');
  const { stream, includeUsage } = streamFields(body);
  // Both checked when both are given, as OpenAI does; max_completion_tokens is the one that counts.
  const maxCompletionTokens = number(body, 'max_completion_tokens', 1, 10_000_000, true);
  const maxTokens = maxCompletionTokens ?? number(body, 'max_tokens', 1, 10_000_000, true) ?? 0;
  if (maxCompletionTokens !== undefined) number(body, 'max_tokens', 1, 10_000_000, true);
  const timeout = number(body, 'request_timeout_time', 1, limits.maxTimeout, false);
  const { plain, whole } = messages(body.messages);
  const { params, needs } = parseChatParams(body, whole !== undefined);
  if (whole) params.messages = whole;
  return {
    model: body.model,
    messages: plain,
    maxTokens,
    temperature: params.temperature ?? OPENAI_DEFAULT_TEMPERATURE,
    params,
    needs,
    seed: seedOf(body),
    stream,
    includeUsage,
    timeoutSeconds: timeout ?? limits.defaultTimeout,
  };
}

/**
 * A conversation kept whole (system first, tool calls and results in place) as the job a front
 * door's request becomes (Messages, Responses): the seed's workers read its roles and texts; where
 * some message is more than role and text, `params.messages` keeps it whole and the job needs the
 * `tools` capability. `params` and `needs` are the request's other parameters, as parsed.
 */
export function conversationJob(
  body: Record<string, unknown> & { model: string },
  whole: ChatMessage[],
  o: {
    params: ChatParams;
    needs: number;
    maxTokens: number | undefined;
    defaultTemperature: number;
    limits: { defaultTimeout: number; maxTimeout: number };
  },
): ChatRequest {
  let needs = o.needs;
  if (whole.some((m) => m.tool_calls || m.role === 'tool')) {
    o.params.messages = whole;
    needs |= CAPABILITIES.tools;
  }
  const timeout = number(body, 'request_timeout_time', 1, o.limits.maxTimeout, false);
  return {
    model: body.model,
    messages: whole.map((m) => ({ role: m.role, content: m.content ?? '' })),
    maxTokens: o.maxTokens ?? 0,
    temperature: o.params.temperature ?? o.defaultTemperature,
    params: o.params,
    needs,
    seed: undefined,
    stream: body.stream === true,
    includeUsage: false,
    timeoutSeconds: timeout ?? o.limits.defaultTimeout,
  };
}

/**
 * OpenAI's `seed`: any integer (the API's is 64-bit, and apps send negative ones too). The nodes'
 * backends take 0 to 2^31 − 1 (llama.cpp's is unsigned 32-bit, Ollama's and vLLM's signed), so
 * it is taken modulo 2^31: the same seed always gives the same backend seed, and seeds that
 * differ by a multiple of 2^31 share one. Before, any seed outside that range was 400.
 */
export function seedOf(body: Record<string, unknown>): number | undefined {
  const v = number(body, 'seed', -Number.MAX_VALUE, Number.MAX_VALUE, true);
  if (v === undefined) return undefined;
  const m = 2 ** 31;
  // Beyond 2^53 a JSON integer is already rounded by the parser; % stays exact on the double it became.
  return ((v % m) + m) % m;
}
