// The body of POST /v1/responses (OpenAI's Responses API), read as the job a chat completion
// becomes (openai/request.ts ChatRequest), so that it runs through the front doors' one core
// (front/run.ts). docs/responses.md has the table of what is honoured, ignored and refused:
// - `input` as a string or items: messages (user, assistant, system, developer; text parts),
//   `function_call` and `function_call_output`; `item_reference` to an output item of the key's
//   stored response (the caller reads it); `reasoning` items an earlier answer carried are
//   dropped (the nodes' models do not reason); other items refused by name;
// - `instructions` and every system or developer message become the conversation's one system
//   message, first (chat templates refuse a system turn anywhere else); a previous response's
//   instructions are not carried over, as OpenAI's reference says;
// - `tools` of type function, `tool_choice`, `parallel_tool_calls`, `text.format`,
//   `max_output_tokens`, `temperature`, `top_p` honoured with the capability each needs; hosted
//   tools Codex always sends (`web_search` with no web access, a `namespace` of its agents'
//   tools) are left out of what the model is offered; other tool types refused by name;
// - `reasoning`, `include` (but logprobs), `store`, `metadata`, `prompt_cache_key`, `user`,
//   `safety_identifier`, `service_tier`, `truncation`, `client_metadata` accepted;
// - `previous_response_id`: the stored response's conversation and answer go first (the caller
//   reads it, routes/openai/responses.ts); `background`, `conversation`, `prompt` refused.
import { CAPABILITIES } from '../../jobs/capabilities.js';
import type { ChatMessage, ChatParams, ToolCall } from '../../jobs/request.js';
import { invalidRequest } from './errors.js';
import { given, isObject, number, requestBody, samplingParams, storableDeep } from './chat-params.js';
import { compileStrict } from './strict-schema.js';
import { conversationJob, OPENAI_DEFAULT_TEMPERATURE, type ChatRequest } from './request.js';

const MAX_ITEMS = 2000;
const MAX_TOOLS = 128;
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/** Tool types a client always sends whose absence changes no answer the nodes could give: left out. */
const LEFT_OUT_TOOLS = new Set(['web_search', 'web_search_preview', 'web_search_2025_08_26', 'web_search_preview_2025_03_11', 'namespace']);
/** Request fields the network cannot honour: refused when given other than as their no-op value. */
const REFUSED: Readonly<Record<string, (v: unknown) => boolean>> = Object.freeze({
  background: (v) => v !== false,
  conversation: () => true,
  prompt: () => true,
  max_tool_calls: () => true,
  top_logprobs: (v) => v !== 0,
});

/** What the response object repeats of its request, kept with the job (jobs/stored-responses.ts). */
export interface ResponsesFront {
  wire: 'responses';
  /** The system and developer texts of the input (and of the previous response's), which a continuation carries on; the instructions are not. */
  system: string[];
  store: boolean;
  instructions: string | null;
  previous_response_id: string | null;
  max_output_tokens: number | null;
  tools: unknown[];
  tool_choice: unknown;
  parallel_tool_calls: boolean;
  text: { format: Record<string, unknown> };
  metadata: Record<string, string>;
  temperature: number;
  top_p: number;
}

const refuse = (name: string, why: string) =>
  invalidRequest(`Unsupported parameter: ${why} (docs/responses.md lists what is supported).`, name, 'unsupported_parameter');

/** A message's content as text: a string, or text parts (input_text, output_text, refusal). */
function textOf(v: unknown, param: string): string {
  if (typeof v === 'string') {
    storableDeep(v, param);
    return v;
  }
  if (!Array.isArray(v)) throw invalidRequest(`Invalid type for '${param}': expected a string or an array of content parts.`, param, 'invalid_type');
  return v
    .map((part, k) => {
      const p = `${param}[${k}]`;
      if (isObject(part) && (part.type === 'input_text' || part.type === 'output_text' || part.type === 'text') && typeof part.text === 'string') {
        storableDeep(part.text, p);
        return part.text;
      }
      if (isObject(part) && part.type === 'refusal' && typeof part.refusal === 'string') return part.refusal;
      const kind = isObject(part) && typeof part.type === 'string' ? part.type : 'non-text';
      throw invalidRequest(`Content parts of type '${kind}' are not supported: the nodes run text models. Send text only.`, p, 'unsupported_content');
    })
    .join('');
}

/** A conversation: its system and developer texts apart (they go first, joined), its turns in order. */
export interface Conversation {
  system: string[];
  messages: ChatMessage[];
}

/**
 * The output items of stored responses that `item_reference` items name, by their ids (`msg_…`, `fc_…`), as the
 * items themselves (the caller reads them: the key's own stored, completed responses; routes/openai/responses.ts).
 */
export type ReferencedItems = ReadonlyMap<string, Record<string, unknown>>;

/** The input items as chat messages after `earlier`'s (a previous response's); system and developer texts apart, to go first. */
export function conversationOf(
  input: unknown,
  earlier: Conversation = { system: [], messages: [] },
  referenced: ReferencedItems = new Map(),
): Conversation {
  const messages = [...earlier.messages];
  const system = [...earlier.system];
  if (!given(input)) throw invalidRequest("Missing required parameter: 'input'.", 'input', 'missing_required_parameter');
  if (typeof input === 'string') {
    storableDeep(input, 'input');
    messages.push({ role: 'user', content: input });
    return { messages, system };
  }
  if (!Array.isArray(input)) throw invalidRequest("Invalid type for 'input': expected a string or an array of input items.", 'input', 'invalid_type');
  if (input.length > MAX_ITEMS) throw invalidRequest(`Invalid 'input': at most ${MAX_ITEMS} items.`, 'input', 'array_above_max_length');
  const calls = new Set(earlier.messages.flatMap((m) => (m.tool_calls ?? []).map((c) => c.id)));
  const add = (item: unknown, param: string): void => {
    if (!isObject(item)) throw invalidRequest(`Invalid type for '${param}': expected an object.`, param, 'invalid_type');
    const type = item.type ?? (given(item.role) ? 'message' : undefined);
    switch (type) {
      case 'message': {
        const role = item.role;
        if (role !== 'user' && role !== 'assistant' && role !== 'system' && role !== 'developer')
          throw invalidRequest(
            `Invalid value for '${param}.role': expected one of user, assistant, system, developer.`,
            `${param}.role`,
            'invalid_value',
          );
        const text = textOf(item.content, `${param}.content`);
        if (role === 'system' || role === 'developer') system.push(text);
        else messages.push({ role, content: text });
        return;
      }
      case 'function_call': {
        if (typeof item.call_id !== 'string' || !item.call_id || typeof item.name !== 'string' || typeof item.arguments !== 'string') {
          throw invalidRequest(`Invalid '${param}': a function_call needs call_id, name and arguments (a string).`, param, 'invalid_value');
        }
        storableDeep([item.call_id, item.name, item.arguments], param);
        const call: ToolCall = { id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } };
        calls.add(item.call_id);
        // Calls in a row are one assistant turn, with the text it began with, if any.
        const last = messages.at(-1);
        if (last?.role === 'assistant') last.tool_calls = [...(last.tool_calls ?? []), call];
        else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
        return;
      }
      case 'function_call_output': {
        if (typeof item.call_id !== 'string' || !calls.has(item.call_id))
          throw invalidRequest(
            `No tool call found for function call output with call_id ${String(item.call_id)}.`,
            `${param}.call_id`,
            'invalid_value',
          );
        messages.push({ role: 'tool', content: textOf(item.output, `${param}.output`), tool_call_id: item.call_id });
        return;
      }
      case 'reasoning':
        return;
      // An output item of a stored response, by its id: what the Vercel AI SDK sends for an earlier answer's text while `store` is true (its default).
      case 'item_reference': {
        const found = typeof item.id === 'string' ? referenced.get(item.id) : undefined;
        if (!found)
          throw invalidRequest(
            `Item with id '${String(item.id)}' not found: an item_reference names an output item (msg_…, fc_…) of a completed response this key stored (store: true) and did not delete, within the network's retention of jobs (JOB_RETENTION).`,
            `${param}.id`,
            'item_not_found',
          );
        return add(found, param);
      }
      default:
        throw refuse(`${param}.type`, `input items of type '${typeof type === 'string' ? type : JSON.stringify(type)}'`);
    }
  };
  input.forEach((item, i) => add(item, `input[${i}]`));
  return { messages, system };
}

function tools(v: unknown): { list: ChatParams['tools']; echo: unknown[] } {
  if (!given(v)) return { list: undefined, echo: [] };
  if (!Array.isArray(v)) throw invalidRequest("Invalid type for 'tools': expected an array.", 'tools', 'invalid_type');
  if (v.length > MAX_TOOLS) throw invalidRequest(`Invalid 'tools': at most ${MAX_TOOLS}.`, 'tools', 'array_above_max_length');
  const list: NonNullable<ChatParams['tools']> = [];
  const echo: unknown[] = [];
  v.forEach((t, i) => {
    const param = `tools[${i}]`;
    if (!isObject(t) || typeof t.type !== 'string')
      throw invalidRequest(`Invalid '${param}': expected an object with a type.`, param, 'invalid_value');
    if (LEFT_OUT_TOOLS.has(t.type)) return;
    if (t.type !== 'function') throw refuse(`${param}.type`, `tools of type '${t.type}' (only 'function' tools run on the nodes)`);
    if (typeof t.name !== 'string' || !TOOL_NAME.test(t.name))
      throw invalidRequest(`Invalid '${param}.name': a-z, A-Z, 0-9, _ and -, at most 64.`, `${param}.name`, 'invalid_value');
    if (given(t.parameters) && !isObject(t.parameters))
      throw invalidRequest(`Invalid type for '${param}.parameters': expected an object.`, `${param}.parameters`, 'invalid_type');
    if (given(t.description) && typeof t.description !== 'string')
      throw invalidRequest(`Invalid type for '${param}.description': expected a string.`, `${param}.description`, 'invalid_type');
    storableDeep(t, param);
    if (t.strict === true && isObject(t.parameters)) compileStrict(t.parameters, `${param}.parameters`);
    list.push({
      type: 'function',
      function: {
        name: t.name,
        ...(typeof t.description === 'string' ? { description: t.description } : {}),
        ...(isObject(t.parameters) ? { parameters: t.parameters } : {}),
        ...(typeof t.strict === 'boolean' ? { strict: t.strict } : {}),
      },
    });
    echo.push({ type: 'function', name: t.name, description: t.description ?? null, parameters: t.parameters ?? null, strict: t.strict ?? null });
  });
  return { list: list.length ? list : undefined, echo };
}

function toolChoice(v: unknown, names: Set<string>): ChatParams['tool_choice'] {
  if (!given(v)) return undefined;
  if (v === 'none' || v === 'auto' || v === 'required') return v;
  if (isObject(v) && v.type === 'function' && typeof v.name === 'string') {
    if (!names.has(v.name))
      throw invalidRequest(`Invalid 'tool_choice': no function tool named '${v.name}' in 'tools'.`, 'tool_choice', 'invalid_value');
    return { type: 'function', function: { name: v.name } };
  }
  throw refuse('tool_choice', "tool_choice other than 'none', 'auto', 'required' or {type: 'function', name}");
}

/** `text.format` as chat's response_format; undefined for plain text. */
function format(v: unknown): { rf: ChatParams['response_format']; echo: Record<string, unknown> } {
  if (!given(v)) return { rf: undefined, echo: { type: 'text' } };
  if (!isObject(v)) throw invalidRequest("Invalid type for 'text': expected an object.", 'text', 'invalid_type');
  if (given(v.verbosity) && v.verbosity !== 'medium') throw refuse('text.verbosity', "'text.verbosity' (the nodes' models take no verbosity)");
  const f = v.format;
  if (!given(f)) return { rf: undefined, echo: { type: 'text' } };
  if (!isObject(f) || typeof f.type !== 'string')
    throw invalidRequest("Invalid type for 'text.format': expected an object with a type.", 'text.format', 'invalid_type');
  if (f.type === 'text') return { rf: undefined, echo: { type: 'text' } };
  if (f.type === 'json_object') return { rf: { type: 'json_object' }, echo: { type: 'json_object' } };
  if (f.type !== 'json_schema')
    throw invalidRequest(
      `Invalid value for 'text.format.type': '${f.type}'; expected text, json_object or json_schema.`,
      'text.format.type',
      'invalid_value',
    );
  if (typeof f.name !== 'string' || !TOOL_NAME.test(f.name))
    throw invalidRequest("Invalid 'text.format.name': a-z, A-Z, 0-9, _ and -, at most 64.", 'text.format.name', 'invalid_value');
  if (!isObject(f.schema))
    throw invalidRequest("Missing required parameter: 'text.format.schema'.", 'text.format.schema', 'missing_required_parameter');
  storableDeep(f, 'text.format');
  if (f.strict === true) compileStrict(f.schema, 'text.format.schema');
  return {
    rf: {
      type: 'json_schema',
      json_schema: {
        name: f.name,
        schema: f.schema,
        ...(typeof f.strict === 'boolean' ? { strict: f.strict } : {}),
        ...(typeof f.description === 'string' ? { description: f.description } : {}),
      },
    },
    echo: {
      type: 'json_schema',
      name: f.name,
      schema: f.schema,
      strict: f.strict ?? null,
      ...(typeof f.description === 'string' ? { description: f.description } : {}),
    },
  };
}

function accepted(body: Record<string, unknown>): Record<string, string> {
  for (const name of ['user', 'safety_identifier', 'prompt_cache_key', 'previous_response_id', 'instructions']) {
    if (given(body[name]) && typeof body[name] !== 'string')
      throw invalidRequest(`Invalid type for '${name}': expected a string.`, name, 'invalid_type');
  }
  for (const name of ['store', 'parallel_tool_calls', 'stream']) {
    if (given(body[name]) && typeof body[name] !== 'boolean')
      throw invalidRequest(`Invalid type for '${name}': expected a boolean.`, name, 'invalid_type');
  }
  if (given(body.truncation) && body.truncation !== 'auto' && body.truncation !== 'disabled')
    throw invalidRequest("Invalid value for 'truncation': expected 'auto' or 'disabled'.", 'truncation', 'invalid_value');
  if (given(body.reasoning) && !isObject(body.reasoning))
    throw invalidRequest("Invalid type for 'reasoning': expected an object.", 'reasoning', 'invalid_type');
  if (given(body.include)) {
    if (!Array.isArray(body.include) || !body.include.every((x) => typeof x === 'string'))
      throw invalidRequest("Invalid type for 'include': expected an array of strings.", 'include', 'invalid_type');
    if (body.include.includes('message.output_text.logprobs')) throw refuse('include', "'include' of message.output_text.logprobs");
  }
  const metadata = body.metadata;
  if (!given(metadata)) return {};
  if (!isObject(metadata) || Object.keys(metadata).length > 16 || !Object.values(metadata).every((x) => typeof x === 'string' && x.length <= 512)) {
    throw invalidRequest("Invalid 'metadata': at most 16 string pairs (values up to 512 characters).", 'metadata', 'invalid_value');
  }
  storableDeep(metadata, 'metadata');
  return metadata as Record<string, string>;
}

/**
 * A Responses request as a job. `earlier`: the conversation of the response named by
 * previous_response_id, its answer last (the caller reads it: the key's own stored job);
 * `referenced`: the items its `item_reference` items name (the caller reads them too).
 */
export function parseResponsesRequest(
  raw: unknown,
  limits: { defaultTimeout: number; maxTimeout: number },
  earlier?: Conversation,
  referenced?: ReferencedItems,
): ChatRequest & { front: ResponsesFront } {
  const body = requestBody(raw);
  for (const [name, isRefused] of Object.entries(REFUSED)) {
    if (given(body[name]) && isRefused(body[name])) throw refuse(name, `'${name}'`);
  }
  const metadata = accepted(body);
  const maxTokens = number(body, 'max_output_tokens', 1, 10_000_000, true);
  const { messages, system } = conversationOf(body.input, earlier, referenced);
  const instructions = typeof body.instructions === 'string' ? body.instructions : null;
  if (instructions !== null) storableDeep(instructions, 'instructions');
  const systemText = [...(instructions ? [instructions] : []), ...system].join('\n\n');
  const whole: ChatMessage[] = [...(systemText ? [{ role: 'system', content: systemText }] : []), ...messages];
  const params: ChatParams = {};
  let needs = samplingParams({ temperature: body.temperature, top_p: body.top_p }, params);
  const { list, echo } = tools(body.tools);
  const choice = toolChoice(body.tool_choice, new Set((list ?? []).map((t) => t.function.name)));
  if (list) {
    params.tools = list;
    needs |= CAPABILITIES.tools;
    if (choice !== undefined) params.tool_choice = choice;
    if (choice === 'required' || typeof choice === 'object') needs |= CAPABILITIES.tool_choice;
    if (body.parallel_tool_calls === false) {
      params.parallel_tool_calls = false;
      needs |= CAPABILITIES.tool_choice;
    }
  } else if (choice === 'required' || typeof choice === 'object') {
    throw invalidRequest("Invalid value for 'tool_choice': it needs function tools in 'tools'.", 'tool_choice', 'invalid_value');
  }
  const { rf, echo: formatEcho } = format(body.text);
  if (rf) {
    if (rf.type === 'json_object' && !/json/i.test(JSON.stringify(whole)))
      throw invalidRequest("Response input messages must contain the word 'json' in some form to use 'text.format' of type 'json_object'.", 'input');
    params.response_format = rf;
    needs |= CAPABILITIES.json;
  }
  if (whole.length === 0 || !whole.some((m) => m.role !== 'system'))
    throw invalidRequest("Invalid 'input': no message to answer.", 'input', 'invalid_value');
  return {
    ...conversationJob(body, whole, { params, needs, maxTokens, defaultTemperature: OPENAI_DEFAULT_TEMPERATURE, limits }),
    front: {
      wire: 'responses',
      system,
      store: body.store !== false,
      instructions,
      previous_response_id: typeof body.previous_response_id === 'string' ? body.previous_response_id : null,
      max_output_tokens: maxTokens ?? null,
      tools: echo,
      tool_choice: body.tool_choice ?? 'auto',
      parallel_tool_calls: body.parallel_tool_calls !== false,
      text: { format: formatEcho },
      metadata,
      temperature: params.temperature ?? OPENAI_DEFAULT_TEMPERATURE,
      top_p: params.top_p ?? 1,
    },
  };
}
