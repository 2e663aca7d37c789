// The one core every front door runs a job through (docs/front-doors.md): Chat Completions, text
// completions, Anthropic's Messages and OpenAI's Responses each parse their request into the same
// job request (openai/request.ts ChatRequest) and give a wire (front/wire.ts) that says how the
// job's events look on their wire. The rest is here, once: the model and capability checks, the
// per-key slot, the submission, the wait (a client's hang-up cancels the job), the relay of the
// node's partial output, and the end of a stream.
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
import { logClientClosed, OpenAIError } from '../openai/errors.js';
import type { ChatRequest } from '../openai/request.js';
import { outcomeAsRequested } from '../openai/answer-shape.js';
import { awaitCompletion, failureError, submitCompletion, type Outcome } from '../openai/completion.js';
import type { ServedModels } from '../openai/models.js';
import { charLength } from '../../jobs/progress.js';
import { namesOf } from '../../jobs/capabilities.js';
import type { Done, Event, Failed, ParamNeeding, Wire } from './wire.js';
import { asksChecked, BadDeliveryHeader, DELIVERY_HEADER, tellChecked } from './delivery.js';

/** How often a streamed job waiting for a node may tell where it stands. */
const QUEUE_TELL_MS = 1_000;

export interface RunOptions {
  /** The answer is shaped as the request asked (answer-shape.ts): tool calls allowed, strict schemas. */
  shaped: boolean;
}

/** The key's id once the request is read and its model checked: what every front door does before its job. */
export async function admit(
  deps: Deps,
  served: ServedModels,
  req: FastifyRequest,
  parse: (owner: number) => ChatRequest | Promise<ChatRequest>,
  paramNeeding: ParamNeeding,
  chat: boolean,
): Promise<{ owner: number; job: ChatRequest }> {
  const { metrics } = deps;
  const owner = await authenticateUser(deps, req);
  // Read before the body: a bad value is refused with nothing submitted (front/delivery.ts).
  let checked: boolean;
  try {
    checked = asksChecked(req);
  } catch (err) {
    if (err instanceof BadDeliveryHeader) throw new OpenAIError(400, err.message, 'invalid_request_error', DELIVERY_HEADER, 'invalid_header');
    throw err;
  }
  const job = await parse(owner);
  if (checked) job.checked = true;
  const counted =
    (outcome: string, model = job.model) =>
    () =>
      metrics.completions.inc({ model, outcome });
  // Not a model the network serves: one series for all such names, however many are made up.
  await served.requireServed(job.model, counted('model_not_found', 'other'));
  if (chat) await served.requireChat(job.model, counted('capability_missing'));
  // A job no online node of the model could run would wait for its deadline: refused at once.
  const missing = await served.missing(job.model, job.needs);
  if (missing) {
    counted('capability_missing')();
    const [name] = namesOf(missing);
    const { param, what } = paramNeeding(job, name!);
    throw new OpenAIError(
      400,
      `Unsupported parameter: ${what ?? `'${param}' needs`} the capability '${name}', which no node serving '${job.model}' has now (GET /v1/models lists each model's capabilities).`,
      'invalid_request_error',
      param,
      'unsupported_parameter',
    );
  }
  await served.requireTogether(job.model, job.needs, paramNeeding(job, namesOf(job.needs).at(-1)!).param, counted('capability_missing'));
  return { owner, job };
}

/**
 * Runs one job for a front door: answers the wire's body, or streams the wire's events; a job
 * that ends without an answer is thrown as an OpenAIError (each door's error handler puts it in
 * its own shape) or, once a stream has begun, sent as the wire's error event.
 */
export async function runJob(
  deps: Deps,
  reply: FastifyReply,
  owner: number,
  job: ChatRequest,
  wireOf: (jobId: string) => Wire,
  o: RunOptions,
): Promise<unknown> {
  const { limiters, metrics } = deps;
  const { coordinator } = deps.service;
  const { slot, started, gone } = begin(deps, reply, owner);
  /** A streamed job's time to its first token, seconds (observed with the outcome, which names the node). */
  let firstToken: number | undefined;
  const record = (outcome: Outcome, first?: number) => {
    firstToken ??= first;
    metrics.completions.inc({ model: job.model, outcome: outcome.kind });
    if (outcome.kind === 'done') observeDone(metrics, job.model, outcome, (performance.now() - started) / 1000, firstToken);
    if (!job.stream) metrics.completionFirstByte.observe((performance.now() - started) / 1000);
  };
  try {
    const { id: jobId, held } = await submitCompletion(coordinator, owner, job);
    const wire = wireOf(jobId);
    // Checked delivery (docs/verification.md): the answer is given once its check passed, and says so.
    tellChecked(reply, held);
    const wait = async () => {
      const outcome = await awaitCompletion(coordinator, owner, jobId, job, gone.signal, held);
      return o.shaped ? outcomeAsRequested(job, outcome) : outcome;
    };
    if (!job.stream) {
      const outcome = await wait();
      record(outcome);
      if (outcome.kind !== 'done') throw failureError(outcome);
      return wire.body(outcome);
    }
    return await stream(deps, reply, job, wire, jobId, owner, started, wait, record, held);
  } finally {
    limiters.concurrent.leave(slot);
  }
}

/**
 * Several jobs of one request (text completions with a prompt array: one job per prompt, each
 * on its own node), in one slot of the key: submitted together, waited for together; the body
 * once every one is done, else the first failure, thrown.
 */
export async function runBatch(
  deps: Deps,
  reply: FastifyReply,
  owner: number,
  jobs: ChatRequest[],
  body: (done: Done[], jobIds: string[]) => unknown,
): Promise<unknown> {
  const { limiters, metrics } = deps;
  const { coordinator } = deps.service;
  const { slot, started, gone } = begin(deps, reply, owner);
  try {
    // One header for the request: every prompt's job is checked alike.
    const submitted = await Promise.all(jobs.map((job) => submitCompletion(coordinator, owner, { ...job, checked: jobs[0]!.checked })));
    const ids = submitted.map((s) => s.id);
    tellChecked(
      reply,
      submitted.every((s) => s.held),
    );
    const outcomes = await Promise.all(submitted.map(({ id, held }, i) => awaitCompletion(coordinator, owner, id, jobs[i]!, gone.signal, held)));
    const seconds = (performance.now() - started) / 1000;
    for (const [i, outcome] of outcomes.entries()) {
      metrics.completions.inc({ model: jobs[i]!.model, outcome: outcome.kind });
      if (outcome.kind === 'done') observeDone(metrics, jobs[i]!.model, outcome, seconds);
    }
    metrics.completionFirstByte.observe(seconds);
    const failed = outcomes.find((x): x is Failed => x.kind !== 'done');
    if (failed) throw failureError(failed);
    return body(outcomes as Done[], ids);
  } finally {
    limiters.concurrent.leave(slot);
  }
}

/**
 * A done job's queue time, its time to first token when streamed (`firstToken`, seconds) and,
 * where its node counted them, its output tokens per second of the time after its first lease;
 * by model and node (the node's name is read once per node, after the answer went out).
 */
function observeDone(metrics: Deps['metrics'], model: string, done: Done, seconds: number, firstToken?: number): void {
  if (done.queuedSeconds === null) return;
  metrics.completionQueueWait.observe(done.queuedSeconds);
  const queued = done.queuedSeconds;
  const tokens = done.usage?.estimated ? undefined : done.usage?.completion_tokens;
  metrics.nodeLabels
    .of(done.nodeId)
    .then((node) => {
      metrics.requestQueueTime.observe({ model, node }, queued);
      if (firstToken !== undefined) metrics.timeToFirstToken.observe({ model, node }, firstToken);
      const generating = seconds - queued;
      if (tokens && generating > 0) metrics.outputTokensPerSecond.observe({ model, node }, tokens / generating);
    })
    .catch(() => undefined);
}

/** A run begins: the key's slot taken (left by the caller), the clock started, the client's hang-up watched. */
function begin(deps: Deps, reply: FastifyReply, owner: number): { slot: string; started: number; gone: AbortController } {
  return { slot: enterSlot(deps, owner), started: performance.now(), gone: hangUp(reply) };
}

/** The key's slot among its completions running at once (429 when it has none left); left by the caller. */
function enterSlot({ limiters }: Deps, owner: number): string {
  const slot = `user:${owner}`;
  if (!limiters.concurrent.enter(slot))
    throw new OpenAIError(
      429,
      'Too many completions running at once for this key; retry when one has finished.',
      'requests',
      null,
      'rate_limit_exceeded',
      { 'retry-after': '1' },
    );
  return slot;
}

/** Aborted when the client hangs up before its answer: its jobs are canceled (openai/completion.ts). */
function hangUp(reply: FastifyReply): AbortController {
  const gone = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) gone.abort();
  });
  return gone;
}

async function stream(
  deps: Deps,
  reply: FastifyReply,
  job: ChatRequest,
  wire: Wire,
  jobId: string,
  owner: number,
  started: number,
  wait: () => Promise<Outcome>,
  record: (o: Outcome, firstToken?: number) => void,
  held: boolean,
): Promise<void> {
  const {
    metrics,
    service: { coordinator },
  } = deps;
  const sse = reply.sse;
  let sending = Promise.resolve();
  const emit = (events: Event[]) => {
    sending = sending
      .then(async () => {
        for (const e of events) {
          if (!sse.isConnected) return;
          if (typeof e === 'object' && 'comment' in e) {
            // The stream's headers first, where no event has sent them yet (a text completion's stream opens with its text).
            sse.sendHeaders();
            reply.raw.write(`: ${e.comment}\n\n`);
          } else await sse.send(e);
        }
      })
      .catch(() => undefined);
  };
  // The stream's beginning is queued first, then the job's progress is heard, and only then is
  // the beginning awaited: a node that has the job already may send its first piece meanwhile,
  // and a piece heard before the subscription is one the client would never be sent.
  emit(wire.begin());
  // Partial output as the nodes send it (jobs/progress.ts): a piece that starts where the
  // client's text ends is sent; any other (a gap: a notification lost, or text past the cap)
  // is left to the answer of record at the end.
  let sentChars = 0;
  let sentUnits = 0;
  const sentHash = createHash('sha256');
  // A held answer (checked delivery) streams whole once its check passed: no partial output of
  // the node is relayed, so no text that fails its check is ever shown (docs/verification.md).
  let firstToken: number | undefined;
  const stop = coordinator.onProgress(jobId, (piece) => {
    if (held) return;
    if (piece.at !== sentChars || piece.text === '') return;
    sentChars += charLength(piece.text);
    sentUnits += piece.text.length;
    sentHash.update(piece.text);
    if (sentUnits === piece.text.length) firstToken = (performance.now() - started) / 1000;
    emit(wire.text(piece.text));
  });
  await sending;
  metrics.completionFirstByte.observe((performance.now() - started) / 1000);
  // Until the answer begins, where the job stands (from memory, jobs/open-jobs.ts), each time it changes.
  let told = '';
  const tell = () => {
    const s = sentChars === 0 ? coordinator.pendingJob(jobId, owner) : undefined;
    if (!s) return;
    const standing = { state: s.state, position: s.position ?? null, eta_seconds: s.eta_seconds ?? null };
    const line = JSON.stringify(standing);
    if (line === told) return;
    told = line;
    emit(wire.waiting(standing));
  };
  tell();
  const standing = setInterval(tell, QUEUE_TELL_MS);
  let outcome: Outcome;
  try {
    outcome = await wait();
  } finally {
    clearInterval(standing);
    stop();
    await sending;
  }
  // A node that relayed nothing (the seed's workers send no partial output): its first token reaches the client now.
  if (firstToken === undefined && outcome.kind === 'done' && outcome.answer.message.content) firstToken = (performance.now() - started) / 1000;
  record(outcome, firstToken);
  if (!sse.isConnected) {
    if (outcome.kind === 'gone') logClientClosed(reply.request);
    return;
  }
  if (outcome.kind !== 'done') return end(wire.fail(failureError(outcome)));
  const content = outcome.answer.message.content;
  if (sentUnits > 0 && createHash('sha256').update(content.slice(0, sentUnits)).digest('hex') !== sentHash.digest('hex')) {
    metrics.completions.inc({ model: job.model, outcome: 'diverged' });
    return end(
      wire.fail(
        new OpenAIError(
          502,
          "A node failed mid-answer and the node that finished the job could not continue the text streamed so far; the job's answer is another text. Read it whole with a non-streaming request or GET /get_result.",
          'server_error',
          null,
          'answer_diverged',
        ),
      ),
    );
  }
  return end(wire.finish(outcome, content.slice(sentUnits)));

  async function end(events: Event[]): Promise<void> {
    emit(events);
    await sending;
    sse.close();
  }
}

export type { Done };
