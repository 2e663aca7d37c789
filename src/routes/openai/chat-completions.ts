// POST /v1/chat/completions and POST /chat/completions (the seed system's path): one job per
// completion, answered as OpenAI's `chat.completion`, or with `stream: true` as server-sent
// events the SDKs parse: a role chunk at once, the content, a finish chunk, a usage chunk when
// asked, `data: [DONE]`; keep-alive comments while the job waits (@fastify/sse heartbeat).
//
// A streamed answer is the job's answer of record, never another text: the node's partial
// output is relayed only where it continues what the client has (each piece says where it
// goes, jobs/progress.ts); when a node fails mid-answer the next one continues the same text
// (job_data.answer_prefix), and if the node that finishes the job did not, the stream ends with
// an error event rather than with text that differs from the record. What was sent is kept as
// its length and a running hash, not as text.
import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { authenticateUser } from '../authenticate.js';
import type { Deps } from '../types.js';
import { logClientClosed, OpenAIError } from './errors.js';
import { parseChatRequest, type ChatRequest } from './request.js';
import { samplingField } from './chat-params.js';
import { outcomeAsRequested } from './answer-shape.js';
import { awaitCompletion, endStreamWithError, failureError, finishReason, submitCompletion, usageOf, type Outcome } from './completion.js';
import type { ServedModels } from './models.js';
import type { OpenAIApp } from './context.js';
import { charLength } from '../../jobs/progress.js';
import { namesOf, type Capability } from '../../jobs/capabilities.js';
import type { Answer } from '../../jobs/answer.js';

/** The request's field that needs the capability (for the 400 that names it). */
function paramNeeding(chat: ChatRequest, cap: Capability): string {
  const p = chat.params;
  switch (cap) {
    case 'sampling': return samplingField(p) ?? 'stop';
    case 'tools': return p.tools ? 'tools' : 'messages';
    case 'tool_choice': return p.parallel_tool_calls === false ? 'parallel_tool_calls' : 'tool_choice';
    case 'json': return 'response_format';
    case 'logprobs': return 'logprobs';
    case 'completions': return 'prompt';
    case 'embeddings': return 'input';
    case 'score': return 'messages'; // never needed by a user's request: only score checks (verify/scores.ts) need it
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

/** How often a streamed completion waiting for a node may tell where its job stands. */
const QUEUE_COMMENT_MS = 1_000;

export function chatCompletionRoutes(app: OpenAIApp, deps: Deps, served: ServedModels): void {
  const { limiters, metrics } = deps;
  const { coordinator, options: { coordinator: c } } = deps.service;

  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    const owner = await authenticateUser(deps, req);
    const chat = parseChatRequest(req.body, { defaultTimeout: c.jobTimeout, maxTimeout: c.maxJobTimeout });
    // Not a model the network serves: one series for all such names, however many are made up.
    await served.requireServed(chat.model, () => metrics.completions.inc({ model: 'other', outcome: 'model_not_found' }));
    await served.requireChat(chat.model, () => metrics.completions.inc({ model: chat.model, outcome: 'capability_missing' }));
    // A job no online node of the model could run would wait for its deadline: refused at once.
    const missing = await served.missing(chat.model, chat.needs);
    if (missing) {
      metrics.completions.inc({ model: chat.model, outcome: 'capability_missing' });
      const [name] = namesOf(missing);
      const param = paramNeeding(chat, name!);
      throw new OpenAIError(400, `Unsupported parameter: '${param}' needs the capability '${name}', which no node serving '${chat.model}' has now (GET /v1/models lists each model's capabilities).`, 'invalid_request_error', param, 'unsupported_parameter');
    }
    await served.requireTogether(chat.model, chat.needs, paramNeeding(chat, namesOf(chat.needs).at(-1)!), () => metrics.completions.inc({ model: chat.model, outcome: 'capability_missing' }));
    // The user, however its key was sent.
    const slot = `user:${owner}`;
    if (!limiters.concurrent.enter(slot)) throw new OpenAIError(429, 'Too many completions running at once for this key; retry when one has finished.', 'requests', null, 'rate_limit_exceeded', { 'retry-after': '1' });
    const started = performance.now();
    const gone = new AbortController();
    reply.raw.on('close', () => { if (!reply.raw.writableFinished) gone.abort(); });
    try {
      const jobId = await submitCompletion(coordinator, owner, chat);
      const ids = { id: `chatcmpl-${jobId}`, created: Math.floor(Date.now() / 1000), model: chat.model };
      const wait = async () => outcomeAsRequested(chat, await awaitCompletion(coordinator, owner, jobId, chat, gone.signal));
      if (chat.stream) return await stream(reply, chat, ids, started, jobId, owner, wait);
      const outcome = await wait();
      record(chat, outcome, started);
      if (outcome.kind !== 'done') {
        throw failureError(outcome);
      }
      const usage = usageOf(outcome.usage);
      return {
        ...ids, object: 'chat.completion', system_fingerprint: null,
        choices: [{ index: 0, message: messageOf(outcome.answer), logprobs: outcome.answer.logprobs ? { content: outcome.answer.logprobs.content, refusal: null } : null, finish_reason: finishReason(chat, outcome.usage, outcome.answer) }],
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

  async function stream(reply: FastifyReply, chat: ChatRequest, ids: { id: string; created: number; model: string }, started: number, jobId: string, owner: number, wait: () => Promise<Outcome>): Promise<void> {
    const usageField = chat.includeUsage ? { usage: null } : {};
    const chunk = (delta: Record<string, unknown>, finish: string | null, logprobs: unknown = null) => ({
      data: { ...ids, object: 'chat.completion.chunk', system_fingerprint: null, choices: [{ index: 0, delta, logprobs, finish_reason: finish }], ...usageField },
    });
    const sse = reply.sse;
    await sse.send(chunk({ role: 'assistant', content: '' }, null));
    metrics.completionFirstByte.observe((performance.now() - started) / 1000);
    // Partial output as the nodes send it (jobs/progress.ts): a piece that starts where the
    // client's text ends is sent; any other (a gap: a notification lost, or text past the cap)
    // is left to the answer of record at the end.
    let sentChars = 0;
    let sentUnits = 0;
    const sentHash = createHash('sha256');
    let sending = Promise.resolve();
    const stop = coordinator.onProgress(jobId, (piece) => {
      if (piece.at !== sentChars || piece.text === '') return;
      sentChars += charLength(piece.text);
      sentUnits += piece.text.length;
      sentHash.update(piece.text);
      sending = sending.then(() => (sse.isConnected ? sse.send(chunk({ content: piece.text }, null)) : undefined)).catch(() => undefined);
    });
    // Until the answer begins, where the job stands, as SSE comments (ignored by SSE parsers):
    // `: queue {"state":"queued","position":3,"eta_seconds":12}`, from memory (jobs/open-jobs.ts).
    let told = '';
    const tell = () => {
      const s = sentChars === 0 ? coordinator.pendingJob(jobId, owner) : undefined;
      const line = s ? `: queue ${JSON.stringify({ state: s.state, position: s.position ?? null, eta_seconds: s.eta_seconds ?? null })}\n\n` : '';
      if (!line || line === told) return;
      told = line;
      sending = sending.then(() => { if (sse.isConnected) reply.raw.write(line); }).catch(() => undefined);
    };
    tell();
    const standing = setInterval(tell, QUEUE_COMMENT_MS);
    let outcome: Outcome;
    try {
      outcome = await wait();
    } finally {
      clearInterval(standing);
      stop();
      await sending;
    }
    record(chat, outcome, started);
    if (!sse.isConnected) {
      if (outcome.kind === 'gone') logClientClosed(reply.request);
      return;
    }
    if (outcome.kind !== 'done') {
      // The stream has begun: the error goes as an event, which the SDKs raise as an APIError.
      return endStreamWithError(sse, failureError(outcome));
    }
    // The rest of the answer of record (all of it when no partial output was relayed).
    const content = outcome.answer.message.content;
    if (sentUnits > 0 && createHash('sha256').update(content.slice(0, sentUnits)).digest('hex') !== sentHash.digest('hex')) {
      metrics.completions.inc({ model: chat.model, outcome: 'diverged' });
      return endStreamWithError(sse, {
        message: 'A node failed mid-answer and the node that finished the job could not continue the text streamed so far; the job\'s answer is another text. Read it whole with a non-streaming request or GET /get_result.',
        type: 'server_error', code: 'answer_diverged',
      });
    }
    const rest = content.slice(sentUnits);
    if (rest) await sse.send(chunk({ content: rest }, null));
    // Tool calls as OpenAI streams them: per call, a delta with its index, id and name, then its arguments in pieces.
    for (const [index, call] of (outcome.answer.message.tool_calls ?? []).entries()) {
      await sse.send(chunk({ tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.function.name, arguments: '' } }] }, null));
      const args = call.function.arguments;
      for (let at = 0; at < args.length; at += ARGUMENT_PIECE) {
        await sse.send(chunk({ tool_calls: [{ index, function: { arguments: args.slice(at, at + ARGUMENT_PIECE) } }] }, null));
      }
    }
    // Logprobs come with the answer of record (the relayed pieces carry none): in one chunk before the finish.
    if (outcome.answer.logprobs) await sse.send(chunk({}, null, { content: outcome.answer.logprobs.content, refusal: null }));
    await sse.send(chunk({}, finishReason(chat, outcome.usage, outcome.answer)));
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
