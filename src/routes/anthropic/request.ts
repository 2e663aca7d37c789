// The body of POST /v1/messages (Anthropic's Messages API), read as the job a chat completion
// becomes (openai/request.ts ChatRequest), so that it runs through the one core (front/run.ts).
// docs/anthropic.md has the table of what is honoured, ignored and refused; in short:
// - `system` (a string or text blocks) and any `role: "system"` message inside `messages`
//   (Claude Code sends one after the user's turn) become the conversation's one system message,
//   first, in their order: chat templates refuse a system turn anywhere else;
// - text blocks are joined; `tool_use` blocks are the assistant's tool calls; `tool_result`
//   blocks are the tool's answers (OpenAI's `role: "tool"` messages, before the user's text);
//   `thinking` blocks an earlier answer carried are dropped (the nodes' models do not think);
// - images and documents are refused by name: no node declares vision;
// - `tools` (custom tools: name, description, input_schema, strict), `tool_choice` (auto, any, tool, none,
//   disable_parallel_tool_use), `stop_sequences`, `top_p`, `temperature` are honoured with the
//   capability each needs, as chat's are; server tools (web search, bash…) and `top_k` refused;
// - `output_config.format` (a JSON schema the answer's text keeps: structured outputs; the beta's
//   `output_format` too) is honoured as chat's strict `response_format` (the `json` capability);
// - `cache_control`, `context_management`, the rest of `output_config` (`effort`), `thinking`,
//   `metadata`, `service_tier`, `container`, `mcp_servers` are accepted and change no answer here.
import { CAPABILITIES } from '../../jobs/capabilities.js';
import type { ChatMessage, ChatParams, ToolCall } from '../../jobs/request.js';
import { invalidRequest } from '../openai/errors.js';
import { given, isObject, number, requestBody, storableDeep } from '../openai/chat-params.js';
import { conversationJob, type ChatRequest } from '../openai/request.js';
import { compileStrict } from '../openai/strict-schema.js';

/** Anthropic's default temperature. */
export const ANTHROPIC_DEFAULT_TEMPERATURE = 1;
const MAX_MESSAGES = 1000;
const MAX_TOOLS = 128;
const MAX_STOP = 32;
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,128}$/;

/** Block types that carry what no node here can read: refused by name. */
const UNREADABLE = new Set(['image', 'document', 'search_result', 'container_upload']);
/** Blocks of an earlier answer that change nothing here: dropped. */
const DROPPED = new Set(['thinking', 'redacted_thinking']);
/** Fields that need something no node has: refused when given. */
const REFUSED: Readonly<Record<string, string>> = Object.freeze({
  top_k: "'top_k' is not supported: the nodes' backends take temperature and top_p (docs/anthropic.md)",
});

/** A block's text, stored as PostgreSQL can store it. */
function textOf(block: Record<string, unknown>, param: string): string {
  if (typeof block.text !== 'string') throw invalidRequest(`${param}.text: Field required`, param);
  storableDeep(block.text, param);
  return block.text;
}

/** A content block list or string as text (system prompts, tool results): text blocks alone. */
function plainText(v: unknown, param: string): string {
  if (typeof v === 'string') {
    storableDeep(v, param);
    return v;
  }
  if (!Array.isArray(v)) throw invalidRequest(`${param}: Input should be a valid string or a list of content blocks`, param);
  return v
    .map((b, k) => {
      if (!isObject(b)) throw invalidRequest(`${param}.${k}: Input should be an object`, `${param}.${k}`);
      if (b.type === 'text') return textOf(b, `${param}.${k}`);
      throw unreadable(b, `${param}.${k}`);
    })
    .join('');
}

const unreadable = (b: Record<string, unknown>, param: string) => {
  const kind = typeof b.type === 'string' ? b.type : 'unknown';
  return UNREADABLE.has(kind)
    ? invalidRequest(
        `${param}: content blocks of type '${kind}' are not supported: no node serving a model here declared vision or documents. Send text only.`,
        param,
        'unsupported_content',
      )
    : invalidRequest(
        `${param}.type: Input tag '${kind}' found using 'type' does not match any of the expected tags: 'text', 'tool_use', 'tool_result', 'thinking', 'redacted_thinking'`,
        param,
      );
};

interface Converted {
  messages: ChatMessage[];
  system: string[];
}

/** Anthropic's turns as chat messages (see the file's head); system texts apart, to go first. */
function conversation(v: unknown): Converted {
  if (!Array.isArray(v)) throw invalidRequest('messages: Field required', 'messages');
  if (v.length === 0) throw invalidRequest('messages: at least one message is required', 'messages');
  if (v.length > MAX_MESSAGES) throw invalidRequest(`messages: at most ${MAX_MESSAGES} messages`, 'messages');
  const out: Converted = { messages: [], system: [] };
  // Tool calls not yet answered: a tool_result answers one of the assistant's tool_use blocks before it.
  let unanswered = new Set<string>();
  v.forEach((m, i) => {
    const at = `messages.${i}`;
    if (!isObject(m)) throw invalidRequest(`${at}: Input should be an object`, at);
    if (m.role === 'system') {
      out.system.push(plainText(m.content, `${at}.content`));
      return;
    }
    if (m.role !== 'user' && m.role !== 'assistant') throw invalidRequest(`${at}.role: Input should be 'user' or 'assistant'`, `${at}.role`);
    const blocks: unknown[] = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : Array.isArray(m.content) ? m.content : [];
    if (!Array.isArray(m.content) && typeof m.content !== 'string')
      throw invalidRequest(`${at}.content: Input should be a valid string or a list of content blocks`, `${at}.content`);
    let text = '';
    const calls: ToolCall[] = [];
    blocks.forEach((b, k) => {
      const param = `${at}.content.${k}`;
      if (!isObject(b)) throw invalidRequest(`${param}: Input should be an object`, param);
      if (b.type === 'text') text += textOf(b, param);
      else if (typeof b.type === 'string' && DROPPED.has(b.type)) return;
      else if (b.type === 'tool_use' && m.role === 'assistant') {
        if (typeof b.id !== 'string' || !b.id || typeof b.name !== 'string' || !isObject(b.input))
          throw invalidRequest(`${param}: a tool_use block needs an id, a name and an input object`, param);
        storableDeep([b.id, b.name, b.input], param);
        calls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input) } });
      } else if (b.type === 'tool_result' && m.role === 'user') {
        if (typeof b.tool_use_id !== 'string' || !unanswered.delete(b.tool_use_id)) {
          throw invalidRequest(
            `${param}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${String(b.tool_use_id)}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`,
            param,
          );
        }
        const result = given(b.content) ? plainText(b.content, `${param}.content`) : '';
        // is_error: the tool failed; the model reads that from its answer, as Anthropic's own template says it.
        out.messages.push({ role: 'tool', content: b.is_error === true ? `Error: ${result}` : result, tool_call_id: b.tool_use_id });
      } else throw unreadable(b, param);
    });
    if (m.role === 'assistant') {
      if (unanswered.size)
        throw invalidRequest(
          `${at}: tool_use ids were found without tool_result blocks immediately after: ${[...unanswered].join(', ')}. Each tool_use block must have a corresponding tool_result block in the next message.`,
          at,
        );
      if (calls.length) {
        out.messages.push({ role: 'assistant', content: text || null, tool_calls: calls });
        unanswered = new Set(calls.map((c) => c.id));
      } else out.messages.push({ role: 'assistant', content: text });
      return;
    }
    if (unanswered.size)
      throw invalidRequest(
        `${at}: tool_use ids were found without tool_result blocks immediately after: ${[...unanswered].join(', ')}. Each tool_use block must have a corresponding tool_result block in the next message.`,
        at,
      );
    // The user's text after its tool results (a turn of tool results alone adds no user message).
    if (text || !blocks.some((b) => isObject(b) && b.type === 'tool_result')) out.messages.push({ role: 'user', content: text });
  });
  return out;
}

function tools(v: unknown): ChatParams['tools'] {
  if (!given(v)) return undefined;
  if (!Array.isArray(v)) throw invalidRequest('tools: Input should be a valid list', 'tools');
  if (v.length > MAX_TOOLS) throw invalidRequest(`tools: at most ${MAX_TOOLS} tools`, 'tools');
  if (v.length === 0) return undefined;
  return v.map((t, i) => {
    const param = `tools.${i}`;
    if (!isObject(t)) throw invalidRequest(`${param}: Input should be an object`, param);
    // Server tools (web_search_…, bash_…, text_editor_…, code_execution_…) run at Anthropic; none runs here.
    if (given(t.type) && t.type !== 'custom')
      throw invalidRequest(
        `${param}.type: the tool type '${String(t.type)}' is not supported: only custom tools (name, description, input_schema) are (docs/anthropic.md).`,
        `${param}.type`,
        'unsupported_parameter',
      );
    if (typeof t.name !== 'string' || !TOOL_NAME.test(t.name))
      throw invalidRequest(`${param}.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'`, `${param}.name`);
    if (!isObject(t.input_schema)) throw invalidRequest(`${param}.input_schema: Field required`, `${param}.input_schema`);
    if (given(t.description) && typeof t.description !== 'string')
      throw invalidRequest(`${param}.description: Input should be a valid string`, `${param}.description`);
    if (given(t.strict) && typeof t.strict !== 'boolean') throw invalidRequest(`${param}.strict: Input should be a valid boolean`, `${param}.strict`);
    storableDeep([t.name, t.description, t.input_schema], param);
    // strict: the tool's calls keep its input_schema, as Anthropic guarantees them: checked as chat's strict functions are (answer-shape.ts).
    if (t.strict === true) compileStrict(t.input_schema, `${param}.input_schema`);
    return {
      type: 'function' as const,
      function: {
        name: t.name,
        ...(typeof t.description === 'string' ? { description: t.description } : {}),
        parameters: t.input_schema,
        ...(t.strict === true ? { strict: true } : {}),
      },
    };
  });
}

function toolChoice(v: unknown, names: Set<string>, params: ChatParams): number {
  if (!given(v)) return 0;
  if (!isObject(v) || typeof v.type !== 'string')
    throw invalidRequest("tool_choice: Input should be an object with a type ('auto', 'any', 'tool' or 'none')", 'tool_choice');
  if (given(v.disable_parallel_tool_use) && typeof v.disable_parallel_tool_use !== 'boolean')
    throw invalidRequest('tool_choice.disable_parallel_tool_use: Input should be a valid boolean', 'tool_choice.disable_parallel_tool_use');
  if (names.size === 0) {
    // tool_choice none (or auto) without tools asks for nothing.
    if (v.type === 'none' || v.type === 'auto') return 0;
    throw invalidRequest(`tool_choice: '${v.type}' needs tools`, 'tool_choice');
  }
  let needs = 0;
  switch (v.type) {
    case 'auto':
      params.tool_choice = 'auto';
      break;
    case 'none':
      params.tool_choice = 'none';
      break;
    case 'any':
      params.tool_choice = 'required';
      needs |= CAPABILITIES.tool_choice;
      break;
    case 'tool':
      if (typeof v.name !== 'string' || !names.has(v.name))
        throw invalidRequest(`tool_choice.name: no tool named '${String(v.name)}' in tools`, 'tool_choice.name');
      params.tool_choice = { type: 'function', function: { name: v.name } };
      needs |= CAPABILITIES.tool_choice;
      break;
    default:
      throw invalidRequest(
        `tool_choice.type: Input tag '${v.type}' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'`,
        'tool_choice.type',
      );
  }
  if (v.disable_parallel_tool_use === true && params.tool_choice !== 'none') {
    params.parallel_tool_calls = false;
    needs |= CAPABILITIES.tool_choice;
  }
  return needs;
}

function stopSequences(v: unknown): string[] | undefined {
  if (!given(v)) return undefined;
  if (!Array.isArray(v) || !v.every((s) => typeof s === 'string' && s.length > 0))
    throw invalidRequest('stop_sequences: Input should be a list of non-empty strings', 'stop_sequences');
  if (v.length > MAX_STOP) throw invalidRequest(`stop_sequences: at most ${MAX_STOP}`, 'stop_sequences');
  storableDeep(v, 'stop_sequences');
  return v.length ? (v as string[]) : undefined;
}

/**
 * Structured outputs: `output_config.format` (or the beta's `output_format`), `{type: "json_schema",
 * schema}`, as chat's strict response_format (Anthropic guarantees the schema, so the answer is
 * checked: answer-shape.ts); undefined when the request sets none.
 */
function outputFormat(body: Record<string, unknown>): ChatParams['response_format'] {
  if (given(body.output_config) && !isObject(body.output_config))
    throw invalidRequest('output_config: Input should be a valid dictionary', 'output_config');
  const [format, param] = given(body.output_format)
    ? [body.output_format, 'output_format']
    : [(body.output_config as Record<string, unknown> | undefined)?.format, 'output_config.format'];
  if (!given(format)) return undefined;
  if (!isObject(format) || format.type !== 'json_schema')
    throw invalidRequest(
      `${param}.type: Input tag '${isObject(format) ? String(format.type) : 'unknown'}' found using 'type' does not match any of the expected tags: 'json_schema'`,
      `${param}.type`,
    );
  if (!isObject(format.schema)) throw invalidRequest(`${param}.schema: Field required`, `${param}.schema`);
  storableDeep(format.schema, `${param}.schema`);
  compileStrict(format.schema, `${param}.schema`);
  return { type: 'json_schema', json_schema: { name: 'output', schema: format.schema, strict: true } };
}

/** A Messages request as a job; `count: true` reads it for count_tokens (no max_tokens needed). */
export function parseMessagesRequest(raw: unknown, limits: { defaultTimeout: number; maxTimeout: number }, count = false): ChatRequest {
  const body = requestBody(raw);
  for (const [name, why] of Object.entries(REFUSED)) if (given(body[name])) throw invalidRequest(why, name, 'unsupported_parameter');
  const maxTokens = number(body, 'max_tokens', 1, 10_000_000, true);
  if (maxTokens === undefined && !count) throw invalidRequest('max_tokens: Field required', 'max_tokens', 'missing_required_parameter');
  if (given(body.stream) && typeof body.stream !== 'boolean') throw invalidRequest('stream: Input should be a valid boolean', 'stream');
  if (given(body.metadata) && !isObject(body.metadata)) throw invalidRequest('metadata: Input should be a valid dictionary', 'metadata');
  const { messages, system } = conversation(body.messages);
  const systemText = [...(given(body.system) ? [plainText(body.system, 'system')] : []), ...system].filter((s) => s !== '').join('\n\n');
  const whole: ChatMessage[] = [...(systemText ? [{ role: 'system', content: systemText }] : []), ...messages];
  const params: ChatParams = {};
  let needs = 0;
  const temperature = number(body, 'temperature', 0, 1, false);
  if (temperature !== undefined) params.temperature = temperature;
  const topP = number(body, 'top_p', 0, 1, false);
  if (topP !== undefined) params.top_p = topP;
  const stop = stopSequences(body.stop_sequences);
  if (stop) params.stop = stop;
  if (topP !== undefined || stop) needs |= CAPABILITIES.sampling;
  const list = tools(body.tools);
  needs |= toolChoice(body.tool_choice, new Set((list ?? []).map((t) => t.function.name)), params);
  if (list) {
    params.tools = list;
    needs |= CAPABILITIES.tools;
  } else {
    delete params.tool_choice;
  }
  const format = outputFormat(body);
  if (format) {
    params.response_format = format;
    needs |= CAPABILITIES.json;
  }
  return conversationJob(body, whole, { params, needs, maxTokens, defaultTemperature: ANTHROPIC_DEFAULT_TEMPERATURE, limits });
}
