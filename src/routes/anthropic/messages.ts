// POST /v1/messages (Anthropic's Messages API) and POST /v1/messages/count_tokens: one job per
// message, as a chat completion is (the front doors' core, front/run.ts), answered as
// Anthropic's `message`, or with `stream: true` as its named server-sent events:
// `message_start`, `ping`, per content block `content_block_start` / `content_block_delta`
// (`text_delta`, `input_json_delta`) / `content_block_stop`, `message_delta` (the stop reason and
// the usage), `message_stop`; an `error` event when a begun stream cannot end with the answer.
// docs/anthropic.md says what is honoured, ignored and refused.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Deps } from '../types.js';
import { authenticateUser } from '../authenticate.js';
import { finishReason } from '../openai/completion.js';
import type { ServedModels } from '../openai/models.js';
import type { ChatRequest } from '../openai/request.js';
import { admit, runJob } from '../front/run.js';
import { queueComment, type Done, type Event, type ParamNeeding, type Wire } from '../front/wire.js';
import { estimateTokens } from '../../jobs/answer.js';
import { parseMessagesRequest } from './request.js';
import { anthropicBody } from './errors.js';
import type { FastifyInstance } from 'fastify';

/** A tool call's input is streamed in pieces of this many characters (`input_json_delta`). */
const INPUT_PIECE = 32;

type StopReason = 'end_turn' | 'max_tokens' | 'tool_use';

const STOP_REASONS: Readonly<Record<ReturnType<typeof finishReason>, StopReason>> = Object.freeze({
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
});

/** A tool call's arguments as the object Anthropic's `input` is (a node's text that is no JSON object: an empty input). */
function inputOf(args: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(args);
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** The request's estimated input tokens (its texts' UTF-8 bytes / 4, jobs/answer.ts), before a node counts them. */
export function estimateInput(job: ChatRequest): number {
  const texts = [
    ...job.messages.map((m) => m.content),
    ...(job.params.messages ?? []).flatMap((m) => (m.tool_calls ?? []).map((c) => c.function.arguments)),
    JSON.stringify(job.params.tools ?? []),
  ];
  return texts.reduce((n, t) => n + estimateTokens(t), 0);
}

const usageOf = (job: ChatRequest, done: Done) => ({
  input_tokens: done.usage?.prompt_tokens ?? estimateInput(job),
  output_tokens: done.usage?.completion_tokens ?? 0,
});

/** A message on Anthropic's wire. */
function messagesWire(job: ChatRequest, jobId: string): Wire {
  const id = `msg_${jobId.replace(/-/g, '')}`;
  const stopReason = (done: Done) => STOP_REASONS[finishReason(job, done.usage, done.answer)];
  const event = (type: string, data: Record<string, unknown>): Event => ({ event: type, data: { type, ...data } });
  // Streamed: the index of the open text block, or -1; the next block's index.
  let open = -1;
  let next = 0;
  const text = (piece: string): Event[] => {
    const events: Event[] = [];
    if (open < 0) {
      open = next++;
      events.push(event('content_block_start', { index: open, content_block: { type: 'text', text: '' } }));
    }
    events.push(event('content_block_delta', { index: open, delta: { type: 'text_delta', text: piece } }));
    return events;
  };
  return {
    body: (done) => {
      const content: Record<string, unknown>[] = [];
      if (done.answer.message.content) content.push({ type: 'text', text: done.answer.message.content });
      for (const call of done.answer.message.tool_calls ?? [])
        content.push({ type: 'tool_use', id: call.id, name: call.function.name, input: inputOf(call.function.arguments) });
      return {
        id,
        type: 'message',
        role: 'assistant',
        model: job.model,
        content,
        stop_reason: stopReason(done),
        stop_sequence: null,
        usage: usageOf(job, done),
      };
    },
    begin: () => [
      event('message_start', {
        message: {
          id,
          type: 'message',
          role: 'assistant',
          model: job.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: estimateInput(job), output_tokens: 0 },
        },
      }),
      event('ping', {}),
    ],
    // Anthropic's keep-alive while the job waits for its node, and where it stands as a comment.
    waiting: (s) => [queueComment(s), event('ping', {})],
    text,
    finish: (done, rest) => {
      const events = rest ? text(rest) : [];
      if (open >= 0) events.push(event('content_block_stop', { index: open }));
      for (const call of done.answer.message.tool_calls ?? []) {
        const index = next++;
        events.push(event('content_block_start', { index, content_block: { type: 'tool_use', id: call.id, name: call.function.name, input: {} } }));
        const args = JSON.stringify(inputOf(call.function.arguments));
        for (let at = 0; at < args.length; at += INPUT_PIECE)
          events.push(event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: args.slice(at, at + INPUT_PIECE) } }));
        events.push(event('content_block_stop', { index }));
      }
      events.push(event('message_delta', { delta: { stop_reason: stopReason(done), stop_sequence: null }, usage: usageOf(job, done) }));
      events.push(event('message_stop', {}));
      return events;
    },
    fail: (e) => [{ event: 'error', data: anthropicBody(e) }],
  };
}

const paramNeeding: ParamNeeding = (job, cap) => {
  switch (cap) {
    case 'sampling':
      return { param: job.params.stop ? 'stop_sequences' : 'top_p' };
    case 'tool_choice':
      return { param: 'tool_choice' };
    case 'json':
      return { param: 'output_config.format' };
    default:
      return { param: job.params.tools ? 'tools' : 'messages' };
  }
};

export function messagesRoutes(app: FastifyInstance, deps: Deps, served: ServedModels): void {
  const {
    limiters,
    service: {
      options: { coordinator: c },
    },
  } = deps;
  const limits = { defaultTimeout: c.jobTimeout, maxTimeout: c.maxJobTimeout };
  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    const { owner, job } = await admit(deps, served, req, () => parseMessagesRequest(req.body, limits), paramNeeding, true);
    return runJob(deps, reply, owner, job, (jobId) => messagesWire(job, jobId), { shaped: true });
  };
  app.post('/v1/messages', { sse: { kind: 'manual' as const }, ...(limiters.completions ? { preHandler: limiters.completions } : {}) }, handler);
  // An estimate (docs/anthropic.md): the request's texts and tools at 4 UTF-8 bytes a token, the
  // service's estimate wherever a node counts none. No node is asked, so no model must be online.
  app.post('/v1/messages/count_tokens', async (req) => {
    await authenticateUser(deps, req);
    return { input_tokens: estimateInput(parseMessagesRequest(req.body, limits, true)) };
  });
}
