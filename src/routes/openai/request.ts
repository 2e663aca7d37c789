// The body of POST /v1/chat/completions, read the way OpenAI reads it: the fields this service
// can honour become a job (model, messages, max_tokens or max_completion_tokens, temperature,
// seed, stream, stream_options.include_usage, Infera's request_timeout_time); unknown fields are
// accepted and ignored; what it cannot honour (several choices, tools, images) is refused with
// an invalid_request_error that names the parameter. Text PostgreSQL cannot store (NUL, unpaired
// surrogates) is refused here as on every other route, before anything is queued.
import { isUnstorable, MalformedJson, NUL_ERROR } from '../../validation/pydantic.js';
import { invalidRequest } from './errors.js';

export interface ChatRequest {
  model: string;
  messages: { role: string; content: string }[];
  /** 0: the node's default. */
  maxTokens: number;
  temperature: number;
  /** OpenAI's `seed`, when given (the coordinator draws one otherwise). */
  seed: number | undefined;
  stream: boolean;
  includeUsage: boolean;
  timeoutSeconds: number;
}

/** OpenAI's default temperature. */
export const OPENAI_DEFAULT_TEMPERATURE = 1;
const ROLES = new Set(['system', 'developer', 'user', 'assistant']);
const MAX_MESSAGES = 1000;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const given = (v: unknown): boolean => v !== undefined && v !== null;

const storable = (text: string, param: string): string => {
  if (isUnstorable(text)) throw invalidRequest(`Invalid '${param}': ${NUL_ERROR}.`, param, 'invalid_value');
  return text;
};

function content(v: unknown, i: number): string {
  if (typeof v === 'string') return storable(v, `messages[${i}].content`);
  if (Array.isArray(v)) {
    // Content parts: text is joined; anything else (images, audio, files) cannot be run here.
    return v.map((part, k) => {
      if (isObject(part) && part.type === 'text' && typeof part.text === 'string') return storable(part.text, `messages[${i}].content`);
      const kind = isObject(part) && typeof part.type === 'string' ? part.type : 'non-text';
      throw invalidRequest(`Content parts of type '${kind}' are not supported: the nodes run text models. Send text only.`, `messages[${i}].content[${k}]`, 'unsupported_content');
    }).join('');
  }
  throw invalidRequest(`Invalid type for 'messages[${i}].content': expected a string or an array of text parts.`, `messages[${i}].content`, 'invalid_type');
}

function messages(v: unknown): { role: string; content: string }[] {
  if (!Array.isArray(v)) throw invalidRequest("Missing required parameter: 'messages'.", 'messages', 'missing_required_parameter');
  if (v.length === 0) throw invalidRequest("Invalid 'messages': empty array. Expected an array with minimum length 1.", 'messages', 'empty_array');
  if (v.length > MAX_MESSAGES) throw invalidRequest(`Invalid 'messages': at most ${MAX_MESSAGES} messages.`, 'messages', 'array_above_max_length');
  return v.map((m, i) => {
    if (!isObject(m)) throw invalidRequest(`Invalid type for 'messages[${i}]': expected an object.`, `messages[${i}]`, 'invalid_type');
    if (m.role === 'tool' || m.role === 'function' || given(m.tool_calls) || given(m.function_call)) {
      throw invalidRequest('Tool and function calling are not supported: the nodes run plain chat.', `messages[${i}]`, 'unsupported_parameter');
    }
    if (typeof m.role !== 'string' || !ROLES.has(m.role)) {
      throw invalidRequest(`Invalid value for 'messages[${i}].role': expected one of system, developer, user, assistant.`, `messages[${i}].role`, 'invalid_value');
    }
    return { role: m.role === 'developer' ? 'system' : m.role, content: content(m.content, i) };
  });
}

function number(body: Record<string, unknown>, name: string, min: number, max: number, integer: boolean): number | undefined {
  const v = body[name];
  if (!given(v)) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || (integer && !Number.isInteger(v))) {
    throw invalidRequest(`Invalid type for '${name}': expected ${integer ? 'an integer' : 'a number'}.`, name, 'invalid_type');
  }
  if (v < min || v > max) throw invalidRequest(`Invalid '${name}': ${v} is outside ${min} to ${max}.`, name, 'invalid_value');
  return v;
}

export function parseChatRequest(body: unknown, limits: { defaultTimeout: number; maxTimeout: number }): ChatRequest {
  if (body instanceof MalformedJson || !isObject(body)) {
    throw invalidRequest('We could not parse the JSON body of your request. The API expects a JSON object.', null);
  }
  if (typeof body.model !== 'string' || body.model.length === 0) throw invalidRequest('You must provide a model parameter.', 'model', 'missing_required_parameter');
  if ([...body.model].length > 256) throw invalidRequest("Invalid 'model': at most 256 characters.", 'model', 'invalid_value');
  storable(body.model, 'model');
  const n = number(body, 'n', 1, 128, true);
  if (n !== undefined && n !== 1) throw invalidRequest('Only n = 1 is supported: each completion is one job on one node.', 'n', 'unsupported_parameter');
  for (const name of ['tools', 'functions']) {
    if (given(body[name]) && !(Array.isArray(body[name]) && (body[name] as unknown[]).length === 0)) {
      throw invalidRequest(`'${name}' is not supported: the nodes run plain chat, without tool calling.`, name, 'unsupported_parameter');
    }
  }
  if (given(body.stream) && typeof body.stream !== 'boolean') throw invalidRequest("Invalid type for 'stream': expected a boolean.", 'stream', 'invalid_type');
  const options = body.stream_options;
  if (given(options) && !isObject(options)) throw invalidRequest("Invalid type for 'stream_options': expected an object.", 'stream_options', 'invalid_type');
  const maxTokens = number(body, 'max_completion_tokens', 1, 10_000_000, true) ?? number(body, 'max_tokens', 1, 10_000_000, true) ?? 0;
  const timeout = number(body, 'request_timeout_time', 1, limits.maxTimeout, false);
  return {
    model: body.model,
    messages: messages(body.messages),
    maxTokens,
    temperature: number(body, 'temperature', 0, 2, false) ?? OPENAI_DEFAULT_TEMPERATURE,
    seed: number(body, 'seed', 0, 2 ** 31 - 1, true),
    stream: body.stream === true,
    includeUsage: isObject(options) && options.include_usage === true,
    timeoutSeconds: timeout ?? limits.defaultTimeout,
  };
}
