// The job's OpenAI parameters (job_data.params, docs/openai.md) in each backend's form, and the
// answers' tool calls and logprobs back in OpenAI's. Ollama by its API reference (docs/api.md of
// ollama/ollama): sampling in `options`, `format` ("json" or a JSON schema), `tools` (OpenAI's
// function form), `logprobs`/`top_logprobs`; tool calls come back with `arguments` as an
// object, and a tool's answer goes as `{role: "tool", content, tool_name}`. OpenAI-compatible
// servers take the parameters as they are.
import { randomUUID } from 'node:crypto';
import type { ChatMessage, ChatParams, ToolCall } from './chat-wire.js';
import type { BackendJob } from './backend.js';

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The temperature to send: the client's; absent (the model's default) when the job's params say the client set none. */
export const temperatureOf = (job: BackendJob): number | undefined => (job.params ? job.params.temperature : job.temperature);

export const newCallId = (): string => `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`;

/** Ollama's options, format, tools and logprobs fields for the job. */
export function ollamaFields(job: BackendJob): Record<string, unknown> {
  const p: ChatParams = job.params ?? {};
  const options: Record<string, unknown> = {};
  const temperature = temperatureOf(job);
  if (temperature !== undefined) options.temperature = temperature;
  if (job.max_output > 0) options.num_predict = job.max_output;
  if (job.seed !== undefined) options.seed = job.seed;
  if (p.top_p !== undefined) options.top_p = p.top_p;
  if (p.stop) options.stop = p.stop;
  if (p.presence_penalty !== undefined) options.presence_penalty = p.presence_penalty;
  if (p.frequency_penalty !== undefined) options.frequency_penalty = p.frequency_penalty;
  const out: Record<string, unknown> = { options };
  if (p.response_format?.type === 'json_object') out.format = 'json';
  if (p.response_format?.type === 'json_schema') out.format = p.response_format.json_schema.schema ?? 'json';
  if (p.logprobs) {
    out.logprobs = true;
    if (p.top_logprobs !== undefined) out.top_logprobs = p.top_logprobs;
  }
  if (p.tools && p.tool_choice !== 'none') out.tools = p.tools;
  return out;
}

/** The messages in Ollama's form: tool calls with object arguments, tools' answers with the tool's name. */
export function ollamaMessages(messages: ChatMessage[]): Record<string, unknown>[] {
  const names = new Map<string, string>();
  return messages.map((m) => {
    if (m.tool_calls) {
      for (const c of m.tool_calls) names.set(c.id, c.function.name);
      return {
        role: m.role,
        content: m.content ?? '',
        tool_calls: m.tool_calls.map((c) => ({ function: { name: c.function.name, arguments: parseArguments(c.function.arguments) } })),
      };
    }
    if (m.role === 'tool')
      return {
        role: 'tool',
        content: m.content ?? '',
        ...(m.tool_call_id && names.has(m.tool_call_id) ? { tool_name: names.get(m.tool_call_id) } : {}),
      };
    return { role: m.role, content: m.content ?? '' };
  });
}

function parseArguments(args: string): unknown {
  try {
    return JSON.parse(args) as unknown;
  } catch {
    return {};
  }
}

/** Ollama's tool calls in OpenAI's form. */
export function toolCallsFromOllama(v: unknown): ToolCall[] {
  if (!Array.isArray(v)) return [];
  return v.flatMap((c): ToolCall[] => {
    if (!isObject(c) || !isObject(c.function) || typeof c.function.name !== 'string') return [];
    const args = c.function.arguments;
    return [
      {
        id: typeof c.id === 'string' && c.id ? c.id : newCallId(),
        type: 'function',
        function: { name: c.function.name, arguments: typeof args === 'string' ? args : JSON.stringify(args ?? {}) },
      },
    ];
  });
}

/** A logprob entry in OpenAI's shape: {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}. */
export function logprobEntry(v: unknown): unknown[] {
  if (!isObject(v) || typeof v.token !== 'string' || typeof v.logprob !== 'number') return [];
  const bytes = Array.isArray(v.bytes) ? v.bytes : [...Buffer.from(v.token, 'utf8')];
  const top = Array.isArray(v.top_logprobs)
    ? v.top_logprobs.flatMap((t) =>
        isObject(t) && typeof t.token === 'string' && typeof t.logprob === 'number'
          ? [{ token: t.token, logprob: t.logprob, bytes: Array.isArray(t.bytes) ? t.bytes : [...Buffer.from(t.token, 'utf8')] }]
          : [],
      )
    : [];
  return [{ token: v.token, logprob: v.logprob, bytes, top_logprobs: top }];
}
