// POST /v1/completions: OpenAI's text completions, one job per request (openai/completions-request.ts),
// answered as a `text_completion`, or with `stream: true` as server-sent events of
// `text_completion` chunks: the text as the node generates it, a finish chunk, a usage chunk
// when asked (`stream_options.include_usage`), `data: [DONE]`. As for chat
// (openai/chat-completions.ts), what is streamed is the job's answer of record: partial output is
// relayed only where it continues what the client has, and if the node that finished the job
// did not continue it, the stream ends with an error event.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Deps } from '../types.js';
import { parseCompletionsRequest } from './completions-request.js';
import { samplingField } from './chat-params.js';
import { finishReason, openAIStreamError, usageOf } from './completion.js';
import type { ServedModels } from './models.js';
import type { OpenAIApp } from './context.js';
import type { ChatRequest } from './request.js';
import { admit, runBatch, runJob } from '../front/run.js';
import { queueComment, type Event, type ParamNeeding, type Wire } from '../front/wire.js';

const choice = (text: string, index: number, finish: string | null) => ({ text, index, logprobs: null, finish_reason: finish });

const idsOf = (request: ChatRequest, jobId: string) => ({
  id: `cmpl-${jobId}`,
  object: 'text_completion',
  created: Math.floor(Date.now() / 1000),
  model: request.model,
  system_fingerprint: null,
});

/** A text completion on OpenAI's wire: a `text_completion`, or its chunks ending in `data: [DONE]`. */
function completionWire(request: ChatRequest, jobId: string): Wire {
  const ids = idsOf(request, jobId);
  // With include_usage every chunk but the last carries `usage: null`, as OpenAI's (and chat's here).
  const chunk = (text: string, finish: string | null): Event => ({
    data: { ...ids, ...(request.includeUsage ? { usage: null } : {}), choices: [choice(text, 0, finish)] },
  });
  return {
    body: (done) => {
      const usage = usageOf(done.usage);
      return {
        ...ids,
        choices: [choice(done.answer.message.content, 0, finishReason(request, done.usage, done.answer))],
        ...(usage ? { usage } : {}),
      };
    },
    begin: () => [],
    waiting: (s) => [queueComment(s)],
    text: (piece) => [chunk(piece, null)],
    finish: (done, rest) => [
      ...(rest ? [chunk(rest, null)] : []),
      chunk('', finishReason(request, done.usage, done.answer)),
      ...(request.includeUsage
        ? [{ data: { ...ids, choices: [], usage: usageOf(done.usage) ?? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } } }]
        : []),
      '[DONE]',
    ],
    fail: openAIStreamError,
  };
}

const paramNeeding: ParamNeeding = (request, cap) =>
  cap === 'completions' ? { param: 'prompt', what: 'text completions need' } : { param: samplingField(request.params) ?? 'stop' };

export function completionsRoutes(app: OpenAIApp, deps: Deps, served: ServedModels): void {
  const { limiters } = deps;
  const c = deps.service.options.coordinator;
  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    let jobs: ChatRequest[] = [];
    const { owner, job } = await admit(
      deps,
      served,
      req,
      () => (jobs = parseCompletionsRequest(req.body, { defaultTimeout: c.jobTimeout, maxTimeout: c.maxJobTimeout }))[0]!,
      paramNeeding,
      false,
    );
    if (jobs.length === 1) return runJob(deps, reply, owner, job, (jobId) => completionWire(job, jobId), { shaped: false });
    // A prompt array: one choice per prompt, in the prompts' order, each from its own job; the usage summed.
    return runBatch(deps, reply, owner, jobs, (done, jobIds) => {
      const usages = done.map((d) => usageOf(d.usage));
      const sum = (k: 'prompt_tokens' | 'completion_tokens' | 'total_tokens') => usages.reduce((n, u) => n + (u?.[k] ?? 0), 0);
      return {
        ...idsOf(job, jobIds[0]!),
        choices: done.map((d, i) => choice(d.answer.message.content, i, finishReason(jobs[i]!, d.usage, d.answer))),
        ...(usages.some(Boolean)
          ? { usage: { prompt_tokens: sum('prompt_tokens'), completion_tokens: sum('completion_tokens'), total_tokens: sum('total_tokens') } }
          : {}),
      };
    });
  };
  app.post('/v1/completions', { sse: { kind: 'manual' as const }, ...(limiters.completions ? { preHandler: limiters.completions } : {}) }, handler);
}
