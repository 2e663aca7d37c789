// POST /v1/chat/completions and POST /chat/completions (the seed system's path): one job per
// completion, answered as OpenAI's `chat.completion`, or with `stream: true` as server-sent
// events the SDKs parse: a role chunk at once, the content, a finish chunk, a usage chunk when
// asked, `data: [DONE]`; keep-alive comments while the job waits (@fastify/sse heartbeat).
import type { FastifyReply, FastifyRequest } from 'fastify';
import { hashKey } from '../../keys.js';
import { authenticateUser, requestKey } from '../authenticate.js';
import type { Deps } from '../types.js';
import { OpenAIError } from './errors.js';
import { parseChatRequest, type ChatRequest } from './request.js';
import { awaitCompletion, failureError, finishReason, submitCompletion, usageOf, type Outcome } from './completion.js';
import type { ServedModels } from './models.js';
import type { OpenAIApp } from './index.js';

export function chatCompletionRoutes(app: OpenAIApp, deps: Deps, served: ServedModels): void {
  const { coordinator, coordinatorConfig: c, limiters, metrics } = deps;

  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    const owner = await authenticateUser(deps, req);
    const chat = parseChatRequest(req.body, { defaultTimeout: c.jobTimeout, maxTimeout: c.maxJobTimeout });
    if (!(await served.has(chat.model))) {
      metrics.completions.inc({ model: chat.model, outcome: 'model_not_found' });
      throw new OpenAIError(404, `The model '${chat.model}' does not exist or no node serves it now (GET /v1/models lists those that do).`, 'invalid_request_error', 'model', 'model_not_found');
    }
    const slot = hashKey(requestKey(req) ?? '');
    if (!limiters.concurrent.enter(slot)) throw new OpenAIError(429, 'Too many completions running at once for this key; retry when one has finished.', 'requests', null, 'rate_limit_exceeded', { 'retry-after': '1' });
    const started = performance.now();
    const gone = new AbortController();
    reply.raw.on('close', () => { if (!reply.raw.writableFinished) gone.abort(); });
    try {
      const jobId = await submitCompletion(coordinator, owner, chat);
      const ids = { id: `chatcmpl-${jobId}`, created: Math.floor(Date.now() / 1000), model: chat.model };
      if (chat.stream) return await stream(reply, chat, ids, started, jobId, () => awaitCompletion(coordinator, owner, jobId, chat, gone.signal));
      const outcome = await awaitCompletion(coordinator, owner, jobId, chat, gone.signal);
      record(chat, outcome, started);
      if (outcome.kind !== 'done') {
        const f = failureError(outcome);
        throw new OpenAIError(f.status, f.message, f.type, null, f.code);
      }
      const usage = usageOf(outcome.usage);
      return {
        ...ids, object: 'chat.completion', system_fingerprint: null,
        choices: [{ index: 0, message: { role: 'assistant', content: outcome.answer.message.content, refusal: null }, logprobs: null, finish_reason: finishReason(chat, outcome.usage) }],
        ...(usage ? { usage } : {}),
      };
    } finally {
      limiters.concurrent.leave(slot);
    }
  };

  function record(chat: ChatRequest, outcome: Outcome, started: number): void {
    metrics.completions.inc({ model: chat.model, outcome: outcome.kind });
    if (outcome.kind === 'done' && outcome.queuedSeconds !== null) metrics.completionQueueWait.observe(outcome.queuedSeconds);
    if (!chat.stream) metrics.completionFirstByte.observe((performance.now() - started) / 1000);
  }

  async function stream(reply: FastifyReply, chat: ChatRequest, ids: { id: string; created: number; model: string }, started: number, jobId: string, wait: () => Promise<Outcome>): Promise<void> {
    const usageField = chat.includeUsage ? { usage: null } : {};
    const chunk = (delta: Record<string, string>, finish: string | null) => ({
      data: { ...ids, object: 'chat.completion.chunk', system_fingerprint: null, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...usageField },
    });
    const sse = reply.sse;
    await sse.send(chunk({ role: 'assistant', content: '' }, null));
    metrics.completionFirstByte.observe((performance.now() - started) / 1000);
    // Partial output as the node sends it (jobs/progress.ts), in order.
    let relayed = '';
    let sending = Promise.resolve();
    const stop = coordinator.onProgress(jobId, (delta) => {
      relayed += delta;
      sending = sending.then(() => (sse.isConnected ? sse.send(chunk({ content: delta }, null)) : undefined)).catch(() => undefined);
    });
    let outcome: Outcome;
    try {
      outcome = await wait();
    } finally {
      stop();
      await sending;
    }
    record(chat, outcome, started);
    if (!sse.isConnected) return;
    if (outcome.kind !== 'done') {
      // The stream has begun: the error goes as an event, which the SDKs raise as an APIError.
      const f = failureError(outcome);
      await sse.send({ data: { error: { message: f.message, type: f.type, param: null, code: f.code } } });
      return sse.close();
    }
    // The rest of the answer of record (all of it when the node sent no partial output).
    const content = outcome.answer.message.content;
    const rest = content.startsWith(relayed) ? content.slice(relayed.length) : '';
    if (rest) await sse.send(chunk({ content: rest }, null));
    await sse.send(chunk({}, finishReason(chat, outcome.usage)));
    if (chat.includeUsage) {
      await sse.send({ data: { ...ids, object: 'chat.completion.chunk', system_fingerprint: null, choices: [], usage: usageOf(outcome.usage) ?? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } } });
    }
    await sse.send('[DONE]');
    sse.close();
  }

  const route = { sse: { kind: 'manual' as const }, ...(limiters.completions ? { preHandler: limiters.completions } : {}) };
  app.post('/v1/chat/completions', route, handler);
  app.post('/chat/completions', route, handler);
}
