// The OpenAI chat parameters beyond the seed system's fields (issue 28; docs/openai.md has the
// table): each one is honoured — carried in the job (jobs/request.ts ChatParams) with the
// capability it needs of the node (jobs/capabilities.ts) — or refused with a 400
// `unsupported_parameter` that names it. None is dropped. Values are checked as OpenAI checks
// them (ranges, types), so a node never gets one its backend would refuse for its form alone.
import { CAPABILITIES } from '../../jobs/capabilities.js';
import type { ChatParams } from '../../jobs/request.js';
import { isUnstorable, MalformedJson, NUL_ERROR } from '../../validation/pydantic.js';
import { invalidRequest } from './errors.js';
import { compileStrict } from './strict-schema.js';

export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
export const given = (v: unknown): boolean => v !== undefined && v !== null;

/** Fields OpenAI's chat API has that the network cannot honour: refused when given (and not their no-op value). */
export const REFUSED: Readonly<Record<string, (v: unknown) => boolean>> = Object.freeze({
  logit_bias: (v) => !(isObject(v) && Object.keys(v).length === 0),
  functions: (v) => !(Array.isArray(v) && v.length === 0),
  function_call: () => true,
  audio: () => true,
  modalities: (v) => !(Array.isArray(v) && v.every((m) => m === 'text')),
  prediction: () => true,
  web_search_options: () => true,
  reasoning_effort: () => true,
  verbosity: () => true,
  store: (v) => v !== false,
});

const MAX_TOOLS = 128;
const MAX_STOP = 4;
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/** Every string inside `v` can be stored (no NUL, no unpaired surrogate), else a 400 naming `param`. */
export function storableDeep(v: unknown, param: string): void {
  if (typeof v === 'string') {
    if (isUnstorable(v)) throw invalidRequest(`Invalid '${param}': ${NUL_ERROR}.`, param, 'invalid_value');
  } else if (Array.isArray(v)) {
    v.forEach((x) => storableDeep(x, param));
  } else if (isObject(v)) {
    for (const [k, x] of Object.entries(v)) {
      storableDeep(k, param);
      storableDeep(x, param);
    }
  }
}

/**
 * An OpenAI request body: a JSON object naming a `model` (1–256 characters PostgreSQL can store),
 * else OpenAI's 400 — chat completions, text completions and embeddings alike.
 */
export function requestBody(body: unknown): Record<string, unknown> & { model: string } {
  if (body instanceof MalformedJson || !isObject(body)) {
    throw invalidRequest('We could not parse the JSON body of your request. The API expects a JSON object.', null);
  }
  if (typeof body.model !== 'string' || body.model.length === 0)
    throw invalidRequest('You must provide a model parameter.', 'model', 'missing_required_parameter');
  if ([...body.model].length > 256) throw invalidRequest("Invalid 'model': at most 256 characters.", 'model', 'invalid_value');
  storableDeep(body.model, 'model');
  return body as Record<string, unknown> & { model: string };
}

export function number(body: Record<string, unknown>, name: string, min: number, max: number, integer: boolean): number | undefined {
  const v = body[name];
  if (!given(v)) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || (integer && !Number.isInteger(v))) {
    throw invalidRequest(`Invalid type for '${name}': expected ${integer ? 'an integer' : 'a number'}.`, name, 'invalid_type');
  }
  if (v < min || v > max) throw invalidRequest(`Invalid '${name}': ${v} is outside ${min} to ${max}.`, name, 'invalid_value');
  return v;
}

function boolean(body: Record<string, unknown>, name: string): boolean | undefined {
  const v = body[name];
  if (!given(v)) return undefined;
  if (typeof v !== 'boolean') throw invalidRequest(`Invalid type for '${name}': expected a boolean.`, name, 'invalid_type');
  return v;
}

export function stop(v: unknown): string[] | undefined {
  if (!given(v)) return undefined;
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || !list.every((s) => typeof s === 'string' && s.length > 0))
    throw invalidRequest("Invalid type for 'stop': expected a string or an array of non-empty strings.", 'stop', 'invalid_type');
  if (list.length > MAX_STOP) throw invalidRequest(`Invalid 'stop': at most ${MAX_STOP} sequences.`, 'stop', 'array_above_max_length');
  storableDeep(list, 'stop');
  return list.length ? (list as string[]) : undefined;
}

function responseFormat(v: unknown): ChatParams['response_format'] {
  if (!given(v)) return undefined;
  if (!isObject(v) || typeof v.type !== 'string')
    throw invalidRequest("Invalid type for 'response_format': expected an object with a type.", 'response_format', 'invalid_type');
  if (v.type === 'text') return undefined;
  if (v.type === 'json_object') return { type: 'json_object' };
  if (v.type !== 'json_schema')
    throw invalidRequest(
      `Invalid value for 'response_format.type': '${v.type}'; expected text, json_object or json_schema.`,
      'response_format.type',
      'invalid_value',
    );
  const js = v.json_schema;
  if (!isObject(js) || typeof js.name !== 'string' || !TOOL_NAME.test(js.name)) {
    throw invalidRequest(
      "Invalid 'response_format.json_schema': expected an object with a name (a-z, A-Z, 0-9, _ and -, at most 64).",
      'response_format.json_schema',
      'invalid_value',
    );
  }
  if (given(js.schema) && !isObject(js.schema))
    throw invalidRequest(
      "Invalid type for 'response_format.json_schema.schema': expected an object.",
      'response_format.json_schema.schema',
      'invalid_type',
    );
  storableDeep(js, 'response_format');
  if (js.strict === true && isObject(js.schema)) compileStrict(js.schema, 'response_format.json_schema.schema');
  return {
    type: 'json_schema',
    json_schema: {
      name: js.name,
      ...(isObject(js.schema) ? { schema: js.schema } : {}),
      ...(typeof js.strict === 'boolean' ? { strict: js.strict } : {}),
      ...(typeof js.description === 'string' ? { description: js.description } : {}),
    },
  };
}

function tools(v: unknown): ChatParams['tools'] {
  if (!given(v)) return undefined;
  if (!Array.isArray(v)) throw invalidRequest("Invalid type for 'tools': expected an array.", 'tools', 'invalid_type');
  if (v.length > MAX_TOOLS) throw invalidRequest(`Invalid 'tools': at most ${MAX_TOOLS}.`, 'tools', 'array_above_max_length');
  const out = v.map((t, i) => {
    const param = `tools[${i}]`;
    // Another kind of tool (OpenAI's 'custom': free-form input, a grammar) is a field the network cannot honour.
    if (isObject(t) && typeof t.type === 'string' && t.type !== 'function')
      throw invalidRequest(
        `Unsupported parameter: '${param}.type' '${t.type}': only tools of type 'function' are supported.`,
        `${param}.type`,
        'unsupported_parameter',
      );
    if (!isObject(t) || t.type !== 'function' || !isObject(t.function))
      throw invalidRequest(`Invalid '${param}': only tools of type 'function' are supported.`, param, 'invalid_value');
    const f = t.function;
    if (typeof f.name !== 'string' || !TOOL_NAME.test(f.name))
      throw invalidRequest(`Invalid '${param}.function.name': a-z, A-Z, 0-9, _ and -, at most 64.`, `${param}.function.name`, 'invalid_value');
    if (given(f.parameters) && !isObject(f.parameters))
      throw invalidRequest(`Invalid type for '${param}.function.parameters': expected an object.`, `${param}.function.parameters`, 'invalid_type');
    if (given(f.description) && typeof f.description !== 'string')
      throw invalidRequest(`Invalid type for '${param}.function.description': expected a string.`, `${param}.function.description`, 'invalid_type');
    storableDeep(f, param);
    if (f.strict === true && isObject(f.parameters)) compileStrict(f.parameters, `${param}.function.parameters`);
    return {
      type: 'function' as const,
      function: {
        name: f.name,
        ...(typeof f.description === 'string' ? { description: f.description } : {}),
        ...(isObject(f.parameters) ? { parameters: f.parameters } : {}),
        ...(typeof f.strict === 'boolean' ? { strict: f.strict } : {}),
      },
    };
  });
  if (out.length === 0)
    throw invalidRequest(
      "Invalid 'tools': empty array. Expected an array with minimum length 1, but got an empty array instead.",
      'tools',
      'empty_array',
    );
  return out;
}

function toolChoice(v: unknown, names: Set<string>): ChatParams['tool_choice'] {
  if (!given(v)) return undefined;
  if (names.size === 0) throw onlyWithTools('tool_choice');
  if (v === 'none' || v === 'auto' || v === 'required') return v;
  if (isObject(v) && v.type === 'function' && isObject(v.function) && typeof v.function.name === 'string') {
    if (!names.has(v.function.name))
      throw invalidRequest(`Invalid 'tool_choice': no tool named '${v.function.name}' in 'tools'.`, 'tool_choice', 'invalid_value');
    return { type: 'function', function: { name: v.function.name } };
  }
  throw invalidRequest(
    "Invalid 'tool_choice': expected none, auto, required or {type: 'function', function: {name}}.",
    'tool_choice',
    'invalid_value',
  );
}

/** OpenAI's 400 for a field that means something only beside `tools`, given without them. */
const onlyWithTools = (name: string): Error =>
  invalidRequest(`Invalid value for '${name}': '${name}' is only allowed when 'tools' are specified.`, name);

const SERVICE_TIERS = new Set(['auto', 'default', 'flex', 'scale', 'priority']);
const METADATA_PAIRS = 16;

/** `user`: a string, as OpenAI checks it (accepted without effect: chat, text completions, embeddings). */
export function userField(body: Record<string, unknown>): void {
  if (given(body.user) && typeof body.user !== 'string') throw invalidRequest("Invalid type for 'user': expected a string.", 'user', 'invalid_type');
}

const CACHE_RETENTIONS = new Set(['in_memory', '24h']);

/**
 * The chat fields accepted without effect on the answer (docs/openai.md), checked as OpenAI
 * checks them, so a request OpenAI refuses is refused here too: `user`, `prompt_cache_key` and
 * `safety_identifier` strings, `metadata` at most 16 string pairs (keys up to 64 characters,
 * values up to 512), `service_tier` one of OpenAI's tiers, `prompt_cache_retention` one of its
 * two, `stream_options.include_obfuscation` a boolean (streams here carry no obfuscation).
 */
function acceptedFields(body: Record<string, unknown>): void {
  userField(body);
  for (const name of ['prompt_cache_key', 'safety_identifier']) {
    if (given(body[name]) && typeof body[name] !== 'string')
      throw invalidRequest(`Invalid type for '${name}': expected a string.`, name, 'invalid_type');
  }
  const retention = body.prompt_cache_retention;
  if (given(retention) && !(typeof retention === 'string' && CACHE_RETENTIONS.has(retention))) {
    throw invalidRequest(
      `Invalid value for 'prompt_cache_retention': expected one of ${[...CACHE_RETENTIONS].join(', ')}.`,
      'prompt_cache_retention',
      'invalid_value',
    );
  }
  const obfuscation = isObject(body.stream_options) ? body.stream_options.include_obfuscation : undefined;
  if (given(obfuscation) && typeof obfuscation !== 'boolean') {
    throw invalidRequest(
      "Invalid type for 'stream_options.include_obfuscation': expected a boolean.",
      'stream_options.include_obfuscation',
      'invalid_type',
    );
  }
  const metadata = body.metadata;
  if (given(metadata)) {
    if (!isObject(metadata)) throw invalidRequest("Invalid type for 'metadata': expected an object.", 'metadata', 'invalid_type');
    const pairs = Object.entries(metadata);
    if (pairs.length > METADATA_PAIRS)
      throw invalidRequest(`Invalid 'metadata': at most ${METADATA_PAIRS} key-value pairs.`, 'metadata', 'object_above_max_properties');
    for (const [k, v] of pairs) {
      if (k.length > 64) throw invalidRequest("Invalid 'metadata': keys are at most 64 characters.", 'metadata', 'invalid_value');
      if (typeof v !== 'string') throw invalidRequest(`Invalid type for 'metadata.${k}': expected a string.`, `metadata.${k}`, 'invalid_type');
      if (v.length > 512) throw invalidRequest(`Invalid 'metadata.${k}': at most 512 characters.`, `metadata.${k}`, 'string_above_max_length');
    }
  }
  const tier = body.service_tier;
  if (given(tier) && !(typeof tier === 'string' && SERVICE_TIERS.has(tier))) {
    throw invalidRequest(`Invalid value for 'service_tier': expected one of ${[...SERVICE_TIERS].join(', ')}.`, 'service_tier', 'invalid_value');
  }
}

/**
 * `stream` and `stream_options`, as OpenAI reads them: a boolean, an object, and the options only
 * with `stream: true` (OpenAI's 400 otherwise). Chat and text completions alike.
 */
export function streamFields(body: Record<string, unknown>): { stream: boolean; includeUsage: boolean } {
  if (given(body.stream) && typeof body.stream !== 'boolean')
    throw invalidRequest("Invalid type for 'stream': expected a boolean.", 'stream', 'invalid_type');
  const options = body.stream_options;
  if (given(options)) {
    if (!isObject(options)) throw invalidRequest("Invalid type for 'stream_options': expected an object.", 'stream_options', 'invalid_type');
    if (body.stream !== true) throw invalidRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.", 'stream_options');
    if (given(options.include_usage) && typeof options.include_usage !== 'boolean') {
      throw invalidRequest("Invalid type for 'stream_options.include_usage': expected a boolean.", 'stream_options.include_usage', 'invalid_type');
    }
  }
  return { stream: body.stream === true, includeUsage: isObject(options) && options.include_usage === true };
}

/** Refuses, by name, each field of `refused` that is given other than as its no-op value. */
export function refuseFields(body: Record<string, unknown>, refused: Readonly<Record<string, (v: unknown) => boolean>>): void {
  for (const [name, isRefused] of Object.entries(refused)) {
    if (given(body[name]) && isRefused(body[name])) {
      throw invalidRequest(
        `Unsupported parameter: '${name}' is not supported by this network (docs/openai.md lists what is).`,
        name,
        'unsupported_parameter',
      );
    }
  }
}

/** The fields that need the `sampling` capability, in the order an error names the first one given. */
const SAMPLING_FIELDS = ['stop', 'top_p', 'presence_penalty', 'frequency_penalty'] as const;

/** The first field of the request that needs the `sampling` capability (an error's `param`); undefined: none. */
export const samplingField = (params: ChatParams): (typeof SAMPLING_FIELDS)[number] | undefined =>
  SAMPLING_FIELDS.find((k) => params[k] !== undefined);

/**
 * The sampling fields chat and text completions share, into `params`: `temperature` when given
 * (absent stays absent), and `top_p`, `stop` and the penalties, which need the `sampling`
 * capability. Answers the capability bits they need.
 */
export function samplingParams(body: Record<string, unknown>, params: ChatParams): number {
  let needs = 0;
  const temperature = number(body, 'temperature', 0, 2, false);
  if (temperature !== undefined) params.temperature = temperature;
  const sampling = {
    top_p: number(body, 'top_p', 0, 1, false),
    stop: stop(body.stop),
    presence_penalty: number(body, 'presence_penalty', -2, 2, false),
    frequency_penalty: number(body, 'frequency_penalty', -2, 2, false),
  };
  for (const [k, v] of Object.entries(sampling)) {
    if (v === undefined) continue;
    Object.assign(params, { [k]: v });
    needs |= CAPABILITIES.sampling;
  }
  return needs;
}

/**
 * The parameters beyond the seed's fields, and the capabilities they need. `toolMessages`:
 * some message carries tool calls or is a tool's answer (the messages are then kept whole).
 */
export function parseChatParams(body: Record<string, unknown>, toolMessages: boolean): { params: ChatParams; needs: number } {
  refuseFields(body, REFUSED);
  acceptedFields(body);
  const params: ChatParams = {};
  let needs = samplingParams(body, params);
  const format = responseFormat(body.response_format);
  // OpenAI's own rule (a model asked for JSON without being told so may write whitespace until
  // max_tokens): some message must say "json".
  if (format?.type === 'json_object' && !/json/i.test(JSON.stringify(body.messages ?? body.prompt ?? ''))) {
    throw invalidRequest("'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.", 'messages');
  }
  if (format) {
    params.response_format = format;
    needs |= CAPABILITIES.json;
  }
  const logprobs = boolean(body, 'logprobs');
  const top = number(body, 'top_logprobs', 0, 20, true);
  if (top !== undefined && logprobs !== true)
    throw invalidRequest("Invalid 'top_logprobs': requires 'logprobs' to be true.", 'top_logprobs', 'invalid_value');
  if (logprobs) {
    params.logprobs = true;
    if (top !== undefined) params.top_logprobs = top;
    needs |= CAPABILITIES.logprobs;
  }
  const list = tools(body.tools);
  const choice = toolChoice(body.tool_choice, new Set((list ?? []).map((t) => t.function.name)));
  const parallel = boolean(body, 'parallel_tool_calls');
  if (parallel !== undefined && !list) throw onlyWithTools('parallel_tool_calls');
  if (list) {
    params.tools = list;
    needs |= CAPABILITIES.tools;
    if (choice !== undefined) params.tool_choice = choice;
    if (choice === 'required' || typeof choice === 'object') needs |= CAPABILITIES.tool_choice;
    if (parallel !== undefined) params.parallel_tool_calls = parallel;
    if (parallel === false) needs |= CAPABILITIES.tool_choice;
  }
  if (toolMessages) needs |= CAPABILITIES.tools;
  return { params, needs };
}
