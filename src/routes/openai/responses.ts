// POST /v1/responses (OpenAI's Responses API): one job per response, as a chat completion is
// (the front doors' core, front/run.ts), answered as a `response` object, or with `stream: true`
// as its typed events, each with `sequence_number` and an `event:` line, no `[DONE]`:
// `response.created`, `response.in_progress`, per output item `response.output_item.added` /
// `.done` (a message: `response.content_part.added`, `response.output_text.delta` / `.done`,
// `response.content_part.done`; a function call: `response.function_call_arguments.delta` /
// `.done`), and exactly one of `response.completed`, `response.incomplete`, `response.failed`.
// A stored response is the job that answered it (jobs/stored-responses.ts): GET reads it back,
// DELETE forgets it, POST …/cancel cancels its job while it runs, `previous_response_id`
// carries its conversation and answer on, and an `item_reference` to one of its output items
// stands for that item. docs/responses.md.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Deps } from '../types.js';
import { authenticateUser } from '../authenticate.js';
import { invalidRequest, OpenAIError } from './errors.js';
import { finishReason, failureError, type Outcome } from './completion.js';
import type { ServedModels } from './models.js';
import type { OpenAIApp } from './context.js';
import type { ChatRequest } from './request.js';
import { samplingField } from './chat-params.js';
import { parseResponsesRequest, type Conversation, type ReferencedItems, type ResponsesFront } from './responses-request.js';
import { admit, runJob } from '../front/run.js';
import { queueComment, type Done, type Event, type ParamNeeding, type Wire } from '../front/wire.js';
import type { Answer, Usage } from '../../jobs/answer.js';
import type { ChatMessage } from '../../jobs/request.js';
import { jobIdSpelled } from '../../jobs/read.js';
import { forgetResponse, storedJob, type StoredJob } from '../../jobs/stored-responses.js';

/** A function call's arguments are streamed in pieces of this many characters. */
const ARGUMENT_PIECE = 32;
/** At most this many stored responses are read for one request's `item_reference` items (each is a read of its job). */
const MAX_REFERENCED = 256;
/** An output item's id (messageItem, callItem): its response's job id in hex, and a function call's index. */
const ITEM_ID = /^(msg|fc)_([0-9a-f]{32})(?:_(\d{1,4}))?$/;

const hex = (jobId: string) => jobId.replace(/-/g, '');
export const responseId = (jobId: string): string => `resp_${hex(jobId)}`;
/** The job id a response id names, or undefined. */
const jobOf = (id: string): string | undefined => (/^resp_[0-9a-f]{32}$/.test(id) ? jobIdSpelled(id.slice(5)) : undefined);

type Status = 'completed' | 'incomplete' | 'failed' | 'cancelled' | 'in_progress' | 'queued';

interface Shape {
  id: string;
  created: number;
  model: string;
  front: ResponsesFront;
}

function usageOf(usage: Usage | null) {
  const input = usage?.prompt_tokens ?? 0;
  const output = usage?.completion_tokens ?? 0;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: input + output,
  };
}

/** The answer's output items: its text as a message (also when it is empty and calls nothing), then each function call. */
function outputOf(s: Shape, answer: Answer): Record<string, unknown>[] {
  const items: Record<string, unknown>[] = [];
  const calls = answer.message.tool_calls ?? [];
  if (answer.message.content || calls.length === 0) items.push(messageItem(s, answer.message.content, 'completed'));
  calls.forEach((c, i) => items.push(callItem(s, i, c.id, c.function.name, c.function.arguments, 'completed')));
  return items;
}

const messageItem = (s: Shape, text: string, status: string) => ({
  id: `msg_${s.id.slice(5)}`,
  type: 'message',
  status,
  role: 'assistant',
  content: status === 'in_progress' ? [] : [{ type: 'output_text', text, annotations: [], logprobs: [] }],
});
const callItem = (s: Shape, i: number, callId: string, name: string, args: string, status: string) => ({
  id: `fc_${s.id.slice(5)}_${i}`,
  type: 'function_call',
  status,
  call_id: callId,
  name,
  arguments: args,
});

/** The response object (OpenAI's `Response`), in any status. */
function responseObject(
  s: Shape,
  status: Status,
  o: { output?: Record<string, unknown>[]; usage?: Usage | null; error?: OpenAIError; incomplete?: boolean } = {},
) {
  const f = s.front;
  return {
    id: s.id,
    object: 'response',
    created_at: s.created,
    status,
    background: false,
    error: o.error ? { code: o.error.code ?? 'server_error', message: o.error.message } : null,
    incomplete_details: o.incomplete ? { reason: 'max_output_tokens' } : null,
    instructions: f.instructions,
    max_output_tokens: f.max_output_tokens,
    max_tool_calls: null,
    model: s.model,
    output: o.output ?? [],
    parallel_tool_calls: f.parallel_tool_calls,
    previous_response_id: f.previous_response_id,
    reasoning: { effort: null, summary: null },
    service_tier: 'default',
    store: f.store,
    temperature: f.temperature,
    text: f.text,
    tool_choice: f.tool_choice,
    tools: f.tools,
    top_logprobs: 0,
    top_p: f.top_p,
    truncation: 'disabled',
    usage: status === 'completed' || status === 'incomplete' ? usageOf(o.usage ?? null) : null,
    user: null,
    metadata: f.metadata,
  };
}

/** Cut at max_output_tokens, as the node said or its count shows (completion.ts finishReason). */
const cutAt = (maxTokens: number, usage: Usage | null, answer: Answer) => finishReason({ maxTokens } as ChatRequest, usage, answer) === 'length';
const incomplete = (job: ChatRequest, done: Done) => cutAt(job.maxTokens, done.usage, done.answer);

/** A response on the Responses wire. */
function responsesWire(job: ChatRequest & { front: ResponsesFront }, jobId: string): Wire {
  const s: Shape = { id: responseId(jobId), created: Math.floor(Date.now() / 1000), model: job.model, front: job.front };
  let seq = 0;
  const event = (type: string, data: Record<string, unknown>): Event => ({ event: type, data: { type, sequence_number: seq++, ...data } });
  // Streamed: whether the message item is open, its text so far, and the next output index.
  let open = false;
  let text = '';
  let index = 0;
  const message = () => ({ item_id: `msg_${s.id.slice(5)}`, output_index: 0, content_index: 0 });
  const delta = (piece: string): Event[] => {
    const events: Event[] = [];
    if (!open) {
      open = true;
      index = 1;
      events.push(event('response.output_item.added', { output_index: 0, item: messageItem(s, '', 'in_progress') }));
      events.push(event('response.content_part.added', { ...message(), part: { type: 'output_text', text: '', annotations: [], logprobs: [] } }));
    }
    text += piece;
    events.push(event('response.output_text.delta', { ...message(), delta: piece, logprobs: [] }));
    return events;
  };
  const failed = (error: OpenAIError) => [event('response.failed', { response: responseObject(s, 'failed', { error }) })];
  return {
    body: (done) =>
      responseObject(s, incomplete(job, done) ? 'incomplete' : 'completed', {
        output: outputOf(s, done.answer),
        usage: done.usage,
        incomplete: incomplete(job, done),
      }),
    begin: () => [
      event('response.created', { response: responseObject(s, 'in_progress') }),
      event('response.in_progress', { response: responseObject(s, 'in_progress') }),
    ],
    waiting: (standing) => [queueComment(standing)],
    text: delta,
    finish: (done, rest) => {
      const calls = done.answer.message.tool_calls ?? [];
      // A message item for the text (and for an empty answer that calls nothing: Codex prints the item it is told is done).
      const events = rest || (!open && calls.length === 0) ? delta(rest) : [];
      if (open) {
        const part = { type: 'output_text', text, annotations: [], logprobs: [] };
        events.push(event('response.output_text.done', { ...message(), text, logprobs: [] }));
        events.push(event('response.content_part.done', { ...message(), part }));
        events.push(event('response.output_item.done', { output_index: 0, item: messageItem(s, text, 'completed') }));
      }
      calls.forEach((c, i) => {
        const at = index++;
        const item = callItem(s, i, c.id, c.function.name, c.function.arguments, 'completed');
        events.push(event('response.output_item.added', { output_index: at, item: { ...item, status: 'in_progress', arguments: '' } }));
        for (let k = 0; k < c.function.arguments.length; k += ARGUMENT_PIECE) {
          events.push(
            event('response.function_call_arguments.delta', {
              item_id: item.id,
              output_index: at,
              delta: c.function.arguments.slice(k, k + ARGUMENT_PIECE),
            }),
          );
        }
        events.push(
          event('response.function_call_arguments.done', {
            item_id: item.id,
            output_index: at,
            name: c.function.name,
            arguments: c.function.arguments,
          }),
        );
        events.push(event('response.output_item.done', { output_index: at, item }));
      });
      const cut = incomplete(job, done);
      events.push(
        event(cut ? 'response.incomplete' : 'response.completed', {
          response: responseObject(s, cut ? 'incomplete' : 'completed', { output: outputOf(s, done.answer), usage: done.usage, incomplete: cut }),
        }),
      );
      return events;
    },
    fail: failed,
  };
}

const paramNeeding: ParamNeeding = (job, cap) => {
  switch (cap) {
    case 'sampling':
      return { param: samplingField(job.params) ?? 'top_p' };
    case 'json':
      return { param: 'text.format' };
    case 'tool_choice':
      return { param: job.params.parallel_tool_calls === false ? 'parallel_tool_calls' : 'tool_choice' };
    default:
      return { param: job.params.tools ? 'tools' : 'input' };
  }
};

/** The conversation a stored response carries on (previous_response_id): its own, less its instructions, then its answer. */
function carriedOn(job: StoredJob, front: ResponsesFront): Conversation {
  const all: ChatMessage[] = job.request.params?.messages ?? job.request.messages;
  const turns = all[0]?.role === 'system' && (front.instructions || front.system.length) ? all.slice(1) : all;
  const answer = job.result!.message;
  const calls = answer.tool_calls ?? [];
  return {
    system: front.system,
    messages: [
      ...turns,
      calls.length ? { role: 'assistant', content: answer.content || null, tool_calls: calls } : { role: 'assistant', content: answer.content },
    ],
  };
}

/** The key's stored response `id` with its front, or undefined (none, another key's, deleted, or not stored). */
async function stored(deps: Deps, id: string, owner: number): Promise<{ job: StoredJob; front: ResponsesFront } | undefined> {
  const jobId = jobOf(id);
  const job = jobId ? await storedJob(deps.service.db, jobId, owner) : undefined;
  const front = job?.request.front as (ResponsesFront & { deleted?: boolean }) | undefined;
  if (!job || front?.wire !== 'responses' || front.deleted) return undefined;
  return { job, front };
}

const notFound = (id: string) => new OpenAIError(404, `No response found with id '${id}'.`, 'invalid_request_error', 'response_id', 'not_found');

/** A stored job as its response object, in the status its state says. */
function storedObject(job: StoredJob, front: ResponsesFront) {
  const s: Shape = { id: responseId(job.id), created: job.created, model: job.model, front };
  switch (job.state) {
    case 'done': {
      const cut = cutAt(front.max_output_tokens ?? 0, job.usage, job.result!);
      return responseObject(s, cut ? 'incomplete' : 'completed', { output: outputOf(s, job.result!), usage: job.usage, incomplete: cut });
    }
    case 'canceled':
      return responseObject(s, 'cancelled');
    case 'queued':
      return responseObject(s, 'queued');
    case 'leased':
      return responseObject(s, 'in_progress');
    default: {
      const outcome: Outcome = job.error
        ? { kind: 'request_error', detail: job.detail ?? job.error.message, error: job.error }
        : { kind: job.state === 'expired' ? 'expired' : 'failed', detail: job.detail ?? 'no node could finish the job' };
      return responseObject(s, 'failed', { error: failureError(outcome) });
    }
  }
}

export function responsesRoutes(app: OpenAIApp, deps: Deps, served: ServedModels): void {
  const {
    limiters,
    service: {
      coordinator,
      options: { coordinator: c },
    },
  } = deps;
  const limits = { defaultTimeout: c.jobTimeout, maxTimeout: c.maxJobTimeout };

  const create = async (req: FastifyRequest, reply: FastifyReply) => {
    let job!: ChatRequest & { front: ResponsesFront };
    const { owner } = await admit(
      deps,
      served,
      req,
      async (key) => (job = parseResponsesRequest(req.body, limits, await previousOf(req.body, key), await referencedBy(req.body, key))),
      paramNeeding,
      true,
    );
    return runJob(deps, reply, owner, job, (jobId) => responsesWire(job, jobId), { shaped: true });
  };

  /** The conversation previous_response_id carries on, when the body names one: 400 when it cannot be. */
  async function previousOf(body: unknown, owner: number): Promise<Conversation | undefined> {
    const previous = typeof body === 'object' && body !== null ? (body as Record<string, unknown>).previous_response_id : undefined;
    if (typeof previous !== 'string') return undefined;
    const found = await stored(deps, previous, owner);
    if (!found || found.job.state !== 'done') {
      throw invalidRequest(
        `Previous response with id '${previous}' not found: it is not this key's, was deleted, did not complete, or is past the network's retention of jobs (JOB_RETENTION).`,
        'previous_response_id',
        'previous_response_not_found',
      );
    }
    if (!found.front.store)
      throw invalidRequest(
        `Previous response with id '${previous}' was created with store: false, so it cannot be continued; send the whole conversation as input instead.`,
        'previous_response_id',
        'previous_response_not_stored',
      );
    return carriedOn(found.job, found.front);
  }
  /**
   * The output items the body's `item_reference` items name, of the key's stored (store: true),
   * completed responses, as the items themselves; ids of no such item are left out (the parser's 400).
   */
  async function referencedBy(body: unknown, owner: number): Promise<ReferencedItems> {
    const input = typeof body === 'object' && body !== null ? (body as Record<string, unknown>).input : undefined;
    const ids = new Set(
      Array.isArray(input)
        ? input.flatMap((i) =>
            typeof i === 'object' &&
            i !== null &&
            (i as Record<string, unknown>).type === 'item_reference' &&
            typeof (i as Record<string, unknown>).id === 'string'
              ? [(i as { id: string }).id]
              : [],
          )
        : [],
    );
    const items = new Map<string, Record<string, unknown>>();
    const responses = new Map<string, Awaited<ReturnType<typeof stored>>>();
    for (const id of ids) {
      const m = ITEM_ID.exec(id);
      if (!m) continue;
      const rid = `resp_${m[2]!}`;
      if (!responses.has(rid)) {
        if (responses.size >= MAX_REFERENCED)
          throw invalidRequest(
            `Invalid 'input': item_reference items name more than ${MAX_REFERENCED} responses; send the items themselves (store: false) or previous_response_id.`,
            'input',
            'invalid_value',
          );
        responses.set(rid, await stored(deps, rid, owner));
      }
      const found = responses.get(rid);
      if (!found || !found.front.store || found.job.state !== 'done') continue;
      const answer = found.job.result!;
      const calls = answer.message.tool_calls ?? [];
      // As outputOf shows them: the message item when the answer has text or calls nothing, then each call.
      if (m[1] === 'msg' && m[3] === undefined && (answer.message.content || calls.length === 0))
        items.set(id, { type: 'message', role: 'assistant', content: answer.message.content });
      const call = m[1] === 'fc' && m[3] !== undefined ? calls[Number(m[3])] : undefined;
      if (call) items.set(id, { type: 'function_call', call_id: call.id, name: call.function.name, arguments: call.function.arguments });
    }
    return items;
  }
  app.post('/v1/responses', { sse: { kind: 'manual' as const }, ...(limiters.completions ? { preHandler: limiters.completions } : {}) }, create);

  const idOf = (req: FastifyRequest) => (req.params as { id: string }).id;
  app.get('/v1/responses/:id', async (req) => {
    const owner = await authenticateUser(deps, req);
    const found = await stored(deps, idOf(req), owner);
    if (!found || !found.front.store) throw notFound(idOf(req));
    return storedObject(found.job, found.front);
  });
  app.delete('/v1/responses/:id', async (req) => {
    const owner = await authenticateUser(deps, req);
    const jobId = jobOf(idOf(req));
    if (!jobId || !(await forgetResponse(deps.service.db, jobId, owner))) throw notFound(idOf(req));
    return { id: idOf(req), object: 'response', deleted: true };
  });
  // Cancels the response's job while it is queued or running (its node is told, and earns
  // nothing); the response then reads `cancelled`. A response that has ended cannot be.
  app.post('/v1/responses/:id/cancel', async (req) => {
    const owner = await authenticateUser(deps, req);
    const found = await stored(deps, idOf(req), owner);
    if (!found) throw notFound(idOf(req));
    if (found.job.state === 'queued' || found.job.state === 'leased') {
      await coordinator.cancel(found.job.id, owner, 'canceled by POST /v1/responses/{id}/cancel');
      const after = await stored(deps, idOf(req), owner);
      return storedObject(after?.job ?? found.job, found.front);
    }
    if (found.job.state === 'canceled') return storedObject(found.job, found.front);
    throw invalidRequest(
      `Cannot cancel a response that has already ended (status ${String(storedObject(found.job, found.front).status)}).`,
      'response_id',
      'response_not_cancellable',
    );
  });
}
