// A chat completion's life on this server: submit the job, wait for its final state (woken by
// the coordinator, jobs/watch.ts, never by polling), and say how it ended. A client that hangs
// up cancels its job, queued or leased: nobody will read the answer, so no node works on it
// (its worker learns it at its next job_progress or report) and none is credited for it.
import type { Coordinator } from '../../jobs/coordinator.js';
import type { Answer, Usage } from '../../jobs/answer.js';
import type { UserJob } from '../../jobs/read.js';
import type { ChatRequest } from './request.js';
import { publicRequestError, type RequestError } from '../../jobs/answer.js';
import type { Event } from '../front/event.js';
import { OpenAIError } from './errors.js';

export type Outcome =
  | { kind: 'done'; answer: Answer; usage: Usage | null; queuedSeconds: number | null; nodeId: number | null }
  | { kind: 'failed' | 'expired' | 'canceled' | 'timeout' | 'gone' | 'shutdown'; detail: string }
  /** The node's answer breaks what the request made certain (a strict schema, JSON mode, a required tool call): answer-shape.ts. */
  | { kind: 'invalid_answer'; detail: string }
  /** The job failed on its own request (a backend's 4xx about it): the backend's error. */
  | { kind: 'request_error'; detail: string; error: RequestError }
  /** Checked delivery: no node could check the answer within the job's deadline; the answer is withheld. */
  | { kind: 'unchecked'; detail: string };

/** How long past the deadline to wait for the sweeper's verdict before answering 504 anyway. */
const SWEEP_GRACE_MS = 3_000;

/** Submits the job: its id, and whether its answer is held until checked (the header's opt-in, or the key's setting). */
export async function submitCompletion(coordinator: Coordinator, owner: number, chat: ChatRequest): Promise<{ id: string; held: boolean }> {
  return coordinator.submit({
    ownerKeyId: owner,
    model: chat.model,
    // params always (even empty): it tells nodes that read it that an absent temperature is the model's default.
    request: {
      messages: chat.messages,
      max_output: chat.maxTokens,
      temperature: chat.temperature,
      ...(chat.seed !== undefined ? { seed: chat.seed } : {}),
      ...(chat.stream ? { stream: true } : {}),
      params: chat.params,
      ...(chat.needs ? { needs: chat.needs } : {}),
      ...(chat.front ? { front: chat.front } : {}),
    },
    timeoutSeconds: chat.timeoutSeconds,
    ...(chat.checked ? { checked: true } : {}),
  });
}

/** Why a held answer is withheld (docs/verification.md, "Checked delivery"). */
export const UNCHECKED_DETAIL =
  "checked delivery: no other node could check the answer within the job's deadline, so it is withheld (send it again with a longer request_timeout_time or when more nodes serve the model, or without checked delivery)";

/** Waits for the job's end; `gone` aborts when the client hangs up. `held`: its answer waits for a check (checked delivery) too. */
export async function awaitCompletion(
  coordinator: Coordinator,
  owner: number,
  jobId: string,
  chat: ChatRequest,
  gone: AbortSignal,
  held = false,
): Promise<Outcome> {
  const until = Date.now() + chat.timeoutSeconds * 1000 + SWEEP_GRACE_MS;
  const finished = await coordinator.waitFinal(jobId, chat.timeoutSeconds * 1000 + SWEEP_GRACE_MS, gone);
  if (held && !gone.aborted && !coordinator.draining) return awaitDelivery(coordinator, owner, jobId, gone, until);
  if (finished?.done)
    return {
      kind: 'done',
      answer: finished.done.result,
      usage: finished.done.usage,
      queuedSeconds: finished.done.queuedSeconds,
      nodeId: finished.done.nodeId,
    };
  if (gone.aborted) {
    await coordinator.cancel(jobId, owner, 'the client went away');
    return { kind: 'gone', detail: 'the client went away' };
  }
  // The server is stopping, and woke every wait (coordinator.drain): the client will be told to
  // send its request again, so its job is canceled, as if it had hung up — else a node would
  // still run it for no one, and the retry would be a second job.
  if (coordinator.draining && (await coordinator.cancel(jobId, owner, 'the server stopped while its client waited')).canceled) {
    return { kind: 'shutdown', detail: 'the server is stopping' };
  }
  const job = await coordinator.ownJob(jobId, owner);
  return job ? outcomeOf(job) : { kind: 'timeout', detail: 'no node finished the job before its deadline' };
}

/**
 * A held job (checked delivery): read it until its delivery is decided — woken by this server's
 * auditor, or reading again every delivery-watch RECHECK_MS — or its deadline (and the sweep's
 * grace) passed; a job that ended otherwise ends as any job does.
 */
async function awaitDelivery(coordinator: Coordinator, owner: number, jobId: string, gone: AbortSignal, until: number): Promise<Outcome> {
  for (;;) {
    const job = await coordinator.ownJob(jobId, owner);
    if (!job) return { kind: 'timeout', detail: 'no node finished the job before its deadline' };
    if (job.state === 'done' && job.delivery === 'checked')
      return { kind: 'done', answer: job.result!, usage: job.usage, queuedSeconds: job.queuedSeconds, nodeId: job.nodeId };
    if (job.state === 'done' && job.delivery === 'unchecked') return { kind: 'unchecked', detail: UNCHECKED_DETAIL };
    if (job.state !== 'done' && job.state !== 'queued' && job.state !== 'leased') return outcomeOf(job);
    if (gone.aborted) {
      if (job.state !== 'done') await coordinator.cancel(jobId, owner, 'the client went away');
      return { kind: 'gone', detail: 'the client went away' };
    }
    const left = until - Date.now();
    if (left <= 0) return job.state === 'done' ? { kind: 'unchecked', detail: UNCHECKED_DETAIL } : outcomeOf(job);
    if (job.state === 'done') await coordinator.waitDelivery(jobId, left, gone);
    else await coordinator.waitFinal(jobId, left, gone);
  }
}

/** How a job read in its final state (or still open past its wait) ended, as an outcome. */
function outcomeOf(job: UserJob): Outcome {
  switch (job.state) {
    case 'done':
      return { kind: 'done', answer: job.result!, usage: job.usage, queuedSeconds: job.queuedSeconds, nodeId: job.nodeId };
    case 'failed':
      return job.error
        ? { kind: 'request_error', detail: job.detail ?? job.error.message, error: job.error }
        : { kind: 'failed', detail: job.detail ?? 'no node could finish the job' };
    case 'expired':
      return { kind: 'expired', detail: job.detail ?? 'the deadline passed' };
    case 'canceled':
      return { kind: 'canceled', detail: job.detail ?? 'canceled' };
    default:
      return { kind: 'timeout', detail: 'no node finished the job before its deadline' };
  }
}

export interface CompletionIds {
  id: string;
  created: number;
  model: string;
}

/** Why the completion ended without an answer, as an OpenAI error (thrown, or sent as a stream's last event). */
export function failureError(o: Exclude<Outcome, { kind: 'done' }>): OpenAIError {
  switch (o.kind) {
    case 'expired':
    case 'timeout':
      // The job had its whole time: the SDKs' default retries (twice, for a 5xx) would queue it
      // again and make the client wait three times as long. x-should-retry: false, as for 409.
      return new OpenAIError(
        504,
        `The request timed out: ${o.detail}. Raise request_timeout_time, or retry when more nodes serve the model.`,
        'timeout',
        null,
        'timeout',
        { 'x-should-retry': 'false' },
      );
    case 'request_error':
      // The request's own error (context length, invalid schema): 400 with a fixed message by its
      // code, never the node's own words, which its operator reads (jobs/answer.ts publicRequestError).
      return new OpenAIError(400, publicRequestError(o.error.code).message, 'invalid_request_error', null, publicRequestError(o.error.code).code);
    case 'canceled':
      // The official SDKs retry a 409 by default, which would submit the canceled job again;
      // x-should-retry: false is the header they read to know better (openai-node, openai-python).
      return new OpenAIError(409, `The job was canceled: ${o.detail}.`, 'invalid_request_error', null, 'canceled', { 'x-should-retry': 'false' });
    case 'gone':
      // No one reads it: the client hung up and its job was canceled. 499, nginx's "client closed
      // request", keeps the access line true and the hang-up out of the warnings (an outside probe
      // found it logged as job_failed).
      return new OpenAIError(499, 'The client closed the request; its job was canceled.', 'invalid_request_error', null, 'client_closed_request');
    case 'invalid_answer':
      // The node's answer, not the request: the SDKs' default retry (a 5xx) is a new job, which may
      // go to another node.
      return new OpenAIError(502, `The node's answer is not what the request asked for: ${o.detail}.`, 'server_error', null, 'invalid_answer');
    case 'unchecked':
      // Checked delivery withheld an answer nobody could check: 503, so that the SDKs' retry may
      // find a checker online; the application asked never to get an unchecked answer.
      return new OpenAIError(503, `The answer could not be checked: ${o.detail}.`, 'server_error', null, 'answer_unchecked');
    case 'shutdown':
      // Retried by the SDKs (a 503), on another server or this one restarted: the job was canceled.
      return new OpenAIError(
        503,
        'The server is stopping: send the request again (its job was canceled).',
        'server_error',
        null,
        'server_shutting_down',
        { 'retry-after': '1' },
      );
    default:
      // MAX_ATTEMPTS nodes failed it already: the SDKs' automatic retry would queue it again for
      // as many more. x-should-retry: false, as for 504 and 409; an app may still retry on purpose.
      return new OpenAIError(502, `No node could finish the job: ${o.detail}.`, 'server_error', null, 'job_failed', { 'x-should-retry': 'false' });
  }
}

/**
 * finish_reason: "tool_calls" when the answer calls tools; what the node's backend said ("stop",
 * "length": `ins worker` reports it); else "length" when the node stopped at max_tokens as its
 * count tells (an estimate tells nothing), else "stop".
 */
export function finishReason(chat: ChatRequest, usage: Usage | null, answer?: Answer): 'stop' | 'length' | 'tool_calls' {
  if (answer?.message.tool_calls?.length) return 'tool_calls';
  if (answer?.finish_reason === 'length' || answer?.finish_reason === 'stop') return answer.finish_reason;
  return chat.maxTokens > 0 && !usage?.estimated && usage?.completion_tokens !== undefined && usage.completion_tokens >= chat.maxTokens
    ? 'length'
    : 'stop';
}

export function usageOf(usage: Usage | null): { prompt_tokens: number; completion_tokens: number; total_tokens: number } | undefined {
  if (!usage) return undefined;
  const prompt = usage.prompt_tokens ?? 0;
  const completion = usage.completion_tokens ?? 0;
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/**
 * The end of an OpenAI stream that has begun but cannot end with the answer: the error as an
 * event, which the SDKs raise as an APIError, then `data: [DONE]`, since every stream ends so
 * (vLLM's error streams too), and a client reading the raw events waits for it.
 */
export function openAIStreamError(error: OpenAIError): Event[] {
  return [{ data: { error: { message: error.message, type: error.type, param: null, code: error.code } } }, '[DONE]'];
}

/** A text in pieces of at most `size` UTF-16 units (a tool call's arguments, as OpenAI streams them). */
export function piecesOf(text: string, size: number): string[] {
  const out: string[] = [];
  for (let at = 0; at < text.length; at += size) out.push(text.slice(at, at + size));
  return out;
}
