// POST /v1/completions: OpenAI's text completions, one job per request (openai/completions-request.ts),
// answered as a `text_completion`, or with `stream: true` as server-sent events of
// `text_completion` chunks: the text as the node generates it, a finish chunk, a usage chunk
// when asked (`stream_options.include_usage`), `data: [DONE]`. As for chat
// (openai/chat-completions.ts), what is streamed is the job's answer of record: partial output is
// relayed only where it continues what the client has, and if the node that finished the job
// did not continue it, the stream ends with an error event.
import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { authenticateUser } from '../authenticate.js';
import type { Deps } from '../types.js';
import { logClientClosed, OpenAIError } from './errors.js';
import { parseCompletionsRequest } from './completions-request.js';
import { samplingField } from './chat-params.js';
import { awaitCompletion, endStreamWithError, failureError, finishReason, submitCompletion, usageOf } from './completion.js';
import type { ServedModels } from './models.js';
import type { OpenAIApp } from './context.js';
import { charLength } from '../../jobs/progress.js';
import { CAPABILITIES, namesOf } from '../../jobs/capabilities.js';

export function completionsRoutes(app: OpenAIApp, deps: Deps, served: ServedModels): void {
  const { limiters, metrics } = deps;
  const { coordinator, options: { coordinator: c } } = deps.service;

  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    const owner = await authenticateUser(deps, req);
    const request = parseCompletionsRequest(req.body, { defaultTimeout: c.jobTimeout, maxTimeout: c.maxJobTimeout });
    await served.requireServed(request.model, () => metrics.completions.inc({ model: 'other', outcome: 'model_not_found' }));
    const missing = await served.missing(request.model, request.needs);
    if (missing) {
      metrics.completions.inc({ model: request.model, outcome: 'capability_missing' });
      const [name] = namesOf(missing);
      const param = missing & CAPABILITIES.completions ? 'prompt' : samplingField(request.params) ?? 'stop';
      const what = missing & CAPABILITIES.completions ? 'text completions need' : `'${param}' needs`;
      throw new OpenAIError(400, `Unsupported parameter: ${what} the capability '${name}', which no node serving '${request.model}' has now (GET /v1/models lists each model's capabilities).`, 'invalid_request_error', param, 'unsupported_parameter');
    }
    await served.requireTogether(request.model, request.needs, samplingField(request.params) ?? 'prompt', () => metrics.completions.inc({ model: request.model, outcome: 'capability_missing' }));
    const slot = `user:${owner}`;
    if (!limiters.concurrent.enter(slot)) throw new OpenAIError(429, 'Too many completions running at once for this key; retry when one has finished.', 'requests', null, 'rate_limit_exceeded', { 'retry-after': '1' });
    const gone = new AbortController();
    reply.raw.on('close', () => { if (!reply.raw.writableFinished) gone.abort(); });
    try {
      const jobId = await submitCompletion(coordinator, owner, request);
      const ids = { id: `cmpl-${jobId}`, object: 'text_completion', created: Math.floor(Date.now() / 1000), model: request.model, system_fingerprint: null };
      // With include_usage every chunk but the last carries `usage: null`, as OpenAI's (and chat's here).
      const chunk = { ...ids, ...(request.includeUsage ? { usage: null } : {}) };
      const choice = (text: string, finish: string | null) => ({ text, index: 0, logprobs: null, finish_reason: finish });
      // Partial output, relayed while the job runs (streamed requests only).
      let sentChars = 0;
      let sentUnits = 0;
      const sentHash = createHash('sha256');
      let sending = Promise.resolve();
      const stopRelay = request.stream
        ? coordinator.onProgress(jobId, (piece) => {
          if (piece.at !== sentChars || piece.text === '') return;
          sentChars += charLength(piece.text);
          sentUnits += piece.text.length;
          sentHash.update(piece.text);
          sending = sending.then(() => (reply.sse.isConnected ? reply.sse.send({ data: { ...chunk, choices: [choice(piece.text, null)] } }) : undefined)).catch(() => undefined);
        })
        : () => {};
      let outcome;
      try {
        outcome = await awaitCompletion(coordinator, owner, jobId, request, gone.signal);
      } finally {
        stopRelay();
        await sending;
      }
      metrics.completions.inc({ model: request.model, outcome: outcome.kind });
      if (!request.stream) {
        if (outcome.kind !== 'done') {
          throw failureError(outcome);
        }
        const usage = usageOf(outcome.usage);
        return { ...ids, choices: [choice(outcome.answer.message.content, finishReason(request, outcome.usage, outcome.answer))], ...(usage ? { usage } : {}) };
      }
      const sse = reply.sse;
      if (!sse.isConnected) {
        if (outcome.kind === 'gone') logClientClosed(reply.request);
        return;
      }
      if (outcome.kind !== 'done') {
        return endStreamWithError(sse, failureError(outcome));
      }
      const content = outcome.answer.message.content;
      if (sentUnits > 0 && createHash('sha256').update(content.slice(0, sentUnits)).digest('hex') !== sentHash.digest('hex')) {
        metrics.completions.inc({ model: request.model, outcome: 'diverged' });
        return endStreamWithError(sse, { message: 'A node failed mid-answer and the node that finished the job could not continue the text streamed so far; read the answer whole with a non-streaming request or GET /get_result.', type: 'server_error', code: 'answer_diverged' });
      }
      const rest = content.slice(sentUnits);
      if (rest) await sse.send({ data: { ...chunk, choices: [choice(rest, null)] } });
      await sse.send({ data: { ...chunk, choices: [choice('', finishReason(request, outcome.usage, outcome.answer))] } });
      if (request.includeUsage) await sse.send({ data: { ...ids, choices: [], usage: usageOf(outcome.usage) ?? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } } });
      await sse.send('[DONE]');
      sse.close();
    } finally {
      limiters.concurrent.leave(slot);
    }
  };

  app.post('/v1/completions', { sse: { kind: 'manual' as const }, ...(limiters.completions ? { preHandler: limiters.completions } : {}) }, handler);
}
