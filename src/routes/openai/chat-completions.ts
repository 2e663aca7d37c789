// POST /v1/chat/completions and POST /chat/completions (the seed system's path): one job per
// completion, answered as OpenAI's `chat.completion`, or with `stream: true` as server-sent
// events the SDKs parse: a role chunk at once, the content, a finish chunk, a usage chunk when
// asked, `data: [DONE]`; keep-alive comments while the job waits (@fastify/sse heartbeat). The
// job runs through the front doors' one core (front/run.ts); this file is the wire.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Deps } from '../types.js';
import { parseChatRequest, type ChatRequest } from './request.js';
import { samplingField } from './chat-params.js';
import { finishReason, openAIStreamError, piecesOf, usageOf } from './completion.js';
import type { ServedModels } from './models.js';
import type { OpenAIApp } from './context.js';
import type { Capability } from '../../jobs/capabilities.js';
import type { Answer } from '../../jobs/answer.js';
import { admit, runJob } from '../front/run.js';
import { queueComment, type Event, type Wire } from '../front/wire.js';

/** The request's field that needs the capability (for the 400 that names it). */
function paramNeeding(chat: ChatRequest, cap: Capability): string {
  const p = chat.params;
  switch (cap) {
    case 'sampling':
      return samplingField(p) ?? 'stop';
    case 'tools':
      return p.tools ? 'tools' : 'messages';
    case 'tool_choice':
      return p.parallel_tool_calls === false ? 'parallel_tool_calls' : 'tool_choice';
    case 'json':
      return 'response_format';
    case 'logprobs':
      return 'logprobs';
    case 'completions':
      return 'prompt';
    case 'embeddings':
      return 'input';
    case 'score':
      return 'messages'; // never needed by a user's request: only score checks (verify/scores.ts) need it
  }
}

/** The answer's message as OpenAI's: tool calls (content null when there is none besides them). */
function messageOf(answer: Answer): Record<string, unknown> {
  const calls = answer.message.tool_calls;
  if (!calls?.length) return { role: 'assistant', content: answer.message.content, refusal: null };
  return { role: 'assistant', content: answer.message.content || null, refusal: null, tool_calls: calls };
}

/** A tool call's arguments are streamed in pieces of this many characters, as OpenAI streams them. */
const ARGUMENT_PIECE = 32;

/** A chat completion on OpenAI's wire: `chat.completion`, or `chat.completion.chunk` events ending in `data: [DONE]`. */
export function chatWire(chat: ChatRequest, jobId: string): Wire {
  const ids = { id: `chatcmpl-${jobId}`, created: Math.floor(Date.now() / 1000), model: chat.model };
  const usageField = chat.includeUsage ? { usage: null } : {};
  const chunk = (delta: Record<string, unknown>, finish: string | null, logprobs: unknown = null): Event => ({
    data: {
      ...ids,
      object: 'chat.completion.chunk',
      system_fingerprint: null,
      choices: [{ index: 0, delta, logprobs, finish_reason: finish }],
      ...usageField,
    },
  });
  return {
    body: (done) => {
      const usage = usageOf(done.usage);
      return {
        ...ids,
        object: 'chat.completion',
        system_fingerprint: null,
        choices: [
          {
            index: 0,
            message: messageOf(done.answer),
            logprobs: done.answer.logprobs ? { content: done.answer.logprobs.content, refusal: null } : null,
            finish_reason: finishReason(chat, done.usage, done.answer),
          },
        ],
        ...(usage ? { usage } : {}),
      };
    },
    begin: () => [chunk({ role: 'assistant', content: '' }, null)],
    waiting: (s) => [queueComment(s)],
    text: (piece) => [chunk({ content: piece }, null)],
    finish: (done, rest) => {
      const events: Event[] = rest ? [chunk({ content: rest }, null)] : [];
      // Tool calls as OpenAI streams them: per call, a delta with its index, id and name, then its arguments in pieces.
      for (const [index, call] of (done.answer.message.tool_calls ?? []).entries()) {
        events.push(chunk({ tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.function.name, arguments: '' } }] }, null));
        for (const piece of piecesOf(call.function.arguments, ARGUMENT_PIECE))
          events.push(chunk({ tool_calls: [{ index, function: { arguments: piece } }] }, null));
      }
      // Logprobs come with the answer of record (the relayed pieces carry none): in one chunk before the finish.
      if (done.answer.logprobs) events.push(chunk({}, null, { content: done.answer.logprobs.content, refusal: null }));
      events.push(chunk({}, finishReason(chat, done.usage, done.answer)));
      if (chat.includeUsage) {
        events.push({
          data: {
            ...ids,
            object: 'chat.completion.chunk',
            system_fingerprint: null,
            choices: [],
            usage: usageOf(done.usage) ?? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
          },
        });
      }
      return [...events, '[DONE]'];
    },
    fail: openAIStreamError,
  };
}

export function chatCompletionRoutes(app: OpenAIApp, deps: Deps, served: ServedModels): void {
  const { limiters } = deps;
  const c = deps.service.options.coordinator;
  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    const { owner, job } = await admit(
      deps,
      served,
      req,
      () => parseChatRequest(req.body, { defaultTimeout: c.jobTimeout, maxTimeout: c.maxJobTimeout }),
      (chat, cap) => ({ param: paramNeeding(chat, cap) }),
      true,
    );
    return runJob(deps, reply, owner, job, (jobId) => chatWire(job, jobId), { shaped: true });
  };
  const route = { sse: { kind: 'manual' as const }, ...(limiters.completions ? { preHandler: limiters.completions } : {}) };
  app.post('/v1/chat/completions', route, handler);
  app.post('/chat/completions', route, handler);
}
