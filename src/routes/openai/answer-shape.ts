// A node's answer as the request asked for it. The node decides what it reports; an app reads
// what OpenAI would send, and agent frameworks run the tool calls they get. So a chat answer
// carries only the tool calls the request allowed — to a tool it offered, the one it named in
// tool_choice, the first alone when parallel_tool_calls is false, none when tool_choice is
// "none" — and logprobs only where it asked for them and each entry has OpenAI's shape
// (ChatCompletionTokenLogprob: token, logprob, bytes, top_logprobs); the rest is left out (outside
// probes: a call named rm_rf to a request with no tools, then to one that offered get_weather;
// logprobs [1, "x", null]). Where the request said `strict: true`, OpenAI guarantees the answer
// matches the schema: an answer that does not (a tool's arguments, response_format's content; a
// json_object answer that is no JSON) is no answer to give the app — the completion fails as
// `invalid_answer` (strict-schema.ts), unless the answer was cut at max_tokens, which OpenAI too
// leaves unfinished.
import type { Answer } from '../../jobs/answer.js';
import type { ChatRequest } from './request.js';
import { finishReason, type Outcome } from './completion.js';
import { isObject } from './chat-params.js';
import { strictMismatch } from './strict-schema.js';

const isBytes = (v: unknown): boolean => v === null || (Array.isArray(v) && v.every((b) => Number.isInteger(b) && b >= 0 && b <= 255));
const isTop = (v: unknown): boolean =>
  isObject(v) && typeof v.token === 'string' && typeof v.logprob === 'number' && Number.isFinite(v.logprob) && isBytes(v.bytes ?? null);
const isEntry = (v: unknown): boolean =>
  isTop(v) && Array.isArray((v as Record<string, unknown>).top_logprobs) && ((v as Record<string, unknown>).top_logprobs as unknown[]).every(isTop);

/** The tool calls the request allows of those the node made. */
function allowedCalls(chat: ChatRequest, calls: NonNullable<Answer['message']['tool_calls']>): typeof calls {
  const p = chat.params;
  if (!p.tools?.length || p.tool_choice === 'none') return [];
  const named = typeof p.tool_choice === 'object' ? p.tool_choice.function.name : undefined;
  const offered = new Set(p.tools.map((t) => t.function.name));
  const kept = calls.filter((c) => (named === undefined ? offered.has(c.function.name) : c.function.name === named));
  return p.parallel_tool_calls === false ? kept.slice(0, 1) : kept;
}

/** The answer with what the request did not ask for, or what OpenAI's shape cannot hold, left out. */
export function asRequested(chat: ChatRequest, answer: Answer): Answer {
  const p = chat.params;
  const calls = answer.message.tool_calls;
  const logprobs = answer.logprobs;
  const kept = calls && allowedCalls(chat, calls);
  const keepCalls = !calls || kept!.length === calls.length;
  const keepLogprobs = !logprobs || (p.logprobs === true && logprobs.content.every(isEntry));
  if (keepCalls && keepLogprobs) return answer;
  const message = { ...answer.message };
  if (!keepCalls) {
    if (kept!.length > 0) message.tool_calls = kept;
    else delete message.tool_calls;
  }
  const out: Answer = { ...answer, message };
  if (!message.tool_calls && out.finish_reason === 'tool_calls') delete out.finish_reason;
  if (!keepLogprobs) delete out.logprobs;
  return out;
}

const parsed = (text: string): { value: unknown } | undefined => {
  try {
    return { value: JSON.parse(text) };
  } catch {
    return undefined;
  }
};

/** Where the answer breaks what the request made certain (strict schemas, JSON mode), or undefined. */
export function brokenPromise(chat: ChatRequest, answer: Answer): string | undefined {
  const p = chat.params;
  for (const call of answer.message.tool_calls ?? []) {
    const tool = p.tools?.find((t) => t.function.name === call.function.name);
    if (tool?.function.strict !== true || !tool.function.parameters) continue;
    const args = parsed(call.function.arguments);
    const why = args ? strictMismatch(tool.function.parameters, args.value) : 'is not JSON';
    if (why) return `the arguments of its call to '${call.function.name}' do not match the tool's strict schema: ${why}`;
  }
  const mustCall = typeof p.tool_choice === 'object' || p.tool_choice === 'required';
  if (mustCall && !answer.message.tool_calls?.length)
    return `it calls no tool, where tool_choice ${typeof p.tool_choice === 'object' ? `named '${p.tool_choice.function.name}'` : 'was required'}`;
  const rf = p.response_format;
  if (!rf || answer.message.tool_calls?.length) return undefined;
  const content = parsed(answer.message.content);
  if (!content) return `its content is not JSON, which response_format ${rf.type} asked for`;
  if (rf.type === 'json_schema' && rf.json_schema.strict === true && rf.json_schema.schema) {
    const why = strictMismatch(rf.json_schema.schema, content.value);
    if (why) return `its content does not match response_format's strict schema: ${why}`;
  }
  return undefined;
}

/** The outcome with its answer as requested (asRequested), or `invalid_answer` where the answer breaks a strict schema or JSON mode (brokenPromise). */
export function outcomeAsRequested(chat: ChatRequest, o: Outcome): Outcome {
  if (o.kind !== 'done') return o;
  const answer = asRequested(chat, o.answer);
  // Cut at max_tokens, as the node said or as its count shows (the seed's workers say nothing): not checked.
  const cut = answer.finish_reason === 'length' || finishReason(chat, o.usage, answer) === 'length';
  const broken = cut ? undefined : brokenPromise(chat, answer);
  return broken ? { kind: 'invalid_answer', detail: broken } : { ...o, answer };
}
