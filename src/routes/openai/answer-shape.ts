// A node's answer as the request asked for it. The node decides what it reports; an app reads
// what OpenAI would send, and agent frameworks run the tool calls they get. So a chat answer
// carries tool calls only where the request offered tools and did not say tool_choice "none",
// and logprobs only where it asked for them and each entry has OpenAI's shape
// (ChatCompletionTokenLogprob: token, logprob, bytes, top_logprobs); otherwise they are left out
// (an outside probe: a call named rm_rf to a request with no tools, logprobs [1, "x", null]).
import type { Answer } from '../../jobs/answer.js';
import type { ChatRequest } from './request.js';
import type { Outcome } from './completion.js';
import { isObject } from './chat-params.js';

const isBytes = (v: unknown): boolean => v === null || (Array.isArray(v) && v.every((b) => Number.isInteger(b) && b >= 0 && b <= 255));
const isTop = (v: unknown): boolean =>
  isObject(v) && typeof v.token === 'string' && typeof v.logprob === 'number' && Number.isFinite(v.logprob) && isBytes(v.bytes ?? null);
const isEntry = (v: unknown): boolean => isTop(v) && Array.isArray((v as Record<string, unknown>).top_logprobs) && ((v as Record<string, unknown>).top_logprobs as unknown[]).every(isTop);

/** The answer with what the request did not ask for, or what OpenAI's shape cannot hold, left out. */
export function asRequested(chat: ChatRequest, answer: Answer): Answer {
  const p = chat.params;
  const toolsOffered = (p.tools?.length ?? 0) > 0 && p.tool_choice !== 'none';
  const calls = answer.message.tool_calls;
  const logprobs = answer.logprobs;
  const keepCalls = !calls || toolsOffered;
  const keepLogprobs = !logprobs || (p.logprobs === true && logprobs.content.every(isEntry));
  if (keepCalls && keepLogprobs) return answer;
  const message = { ...answer.message };
  if (!keepCalls) delete message.tool_calls;
  const out: Answer = { ...answer, message };
  if (!keepCalls && out.finish_reason === 'tool_calls') delete out.finish_reason;
  if (!keepLogprobs) delete out.logprobs;
  return out;
}

/** The outcome with its answer as requested (asRequested). */
export const outcomeAsRequested = (chat: ChatRequest, o: Outcome): Outcome => (o.kind === 'done' ? { ...o, answer: asRequested(chat, o.answer) } : o);
