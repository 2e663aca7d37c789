// The coordinator of one server, as the routes use it: submissions, dispatch to waiting
// workers, completions, give-ups, cancels, partial output and waiting for results. Every state
// change goes through the lifecycle (jobs/lifecycle.ts), whose outcomes reach the parts here —
// the dispatcher, the result watch, the progress relay — and any other consumer added with
// use() (the verifier, the metrics).
import type { Database } from '../db/database.js';
import type { CoordinatorConfig } from '../config.js';
import { DEFAULT_VERIFY } from '../config-verify.js';
import type { SessionRow } from '../repositories/sessions.js';
import { Lifecycle, type LiveConsumer } from './lifecycle.js';
import { DeliveryWatch } from './delivery-watch.js';
import { Submitter, type Submission, type SubmittedJob } from './submit.js';
import { Dispatcher, type DeliveredJob } from './dispatcher.js';
import { pauseAfter } from './sql/sweep.js';
import { Completer, nodeLeaseOf, type Completion, type JobReport } from './complete.js';
import { Sweeper } from './sweeper.js';
import { ResultWatch, type Finished } from './watch.js';
import { finalJobs, JobReader, type UserJob } from './read.js';
import { PROGRESS_CHANNEL, ProgressRelay, type Piece } from './progress.js';
import { Presence } from './presence.js';
import { OpenJobs, type Standing } from './open-jobs.js';
import { Throughput } from './throughput.js';
import { standingsOf } from './sql/standings.js';
import { sql } from '../db/database.js';
import type { JobState } from './states.js';
import type { DoneJob } from './outcome.js';
import { endsAccess, type NodeConsumer, type NodeOutcome } from '../nodes/outcome.js';

export interface CoordinatorOptions extends CoordinatorConfig {
  defaultPointsPerJob: number;
  /** VERIFY_CHECK_PRICE (sql/complete.ts); the documented default when not given. */
  checkPrice?: number;
  /** Done jobs are audited (verification on). */
  audit: boolean;
  /** A background task or a consumer failed: logged and counted by the caller; the coordinator carries on. */
  onError: (err: unknown) => void;
  /** How often session last-seen times are written. */
  presenceFlushMs?: number;
  /** A job submitted for a model with a worker waiting here goes straight to it (default on; off only to measure what it saves). */
  handOff?: boolean;
  /** The dispatcher remembers models with no queued job (default on; off only to measure what it saves). */
  trackEmpty?: boolean;
  /** The dispatcher's once-a-second look for queued jobs its waiters missed (default on; off only to show a test that a job reaches its node without it). */
  recheck?: boolean;
}

// Of the models $1, which have queued jobs, and which queued copies (one EXISTS per partial index).
const QUEUED_MODELS = sql(
  'jobs_queued_models',
  `SELECT m.id,
    EXISTS (SELECT 1 FROM jobs j WHERE j.state = 'queued' AND j.verify_of IS NULL AND j.model_id = m.id AND j.deadline_at > now()) AS jobs,
    EXISTS (SELECT 1 FROM jobs j WHERE j.state = 'queued' AND j.verify_of IS NOT NULL AND j.model_id = m.id AND j.deadline_at > now()) AS copies
  FROM unnest($1::int[]) AS m(id)`,
);

export class Coordinator {
  readonly lifecycle: Lifecycle;
  private readonly submitter: Submitter;
  private readonly deliveries = new DeliveryWatch();
  private readonly dispatcher: Dispatcher;
  private readonly completer: Completer;
  private readonly sweeper: Sweeper;
  private readonly watch: ResultWatch;
  private readonly presence: Presence;
  private readonly reader: JobReader;
  private readonly progress: ProgressRelay;
  private drained = false;
  private readonly throughput = new Throughput();
  private readonly openJobs: OpenJobs;
  private stopListening: (() => Promise<void>)[] = [];

  private constructor(
    private readonly db: Database,
    opts: CoordinatorOptions,
  ) {
    const lifecycle = new Lifecycle(db, {
      maxAttempts: opts.maxAttempts,
      leaseTimeout: opts.leaseTimeout,
      defaultPoints: opts.defaultPointsPerJob,
      checkPrice: opts.checkPrice ?? DEFAULT_VERIFY.checkPrice,
      audit: opts.audit,
      onError: opts.onError,
      stranding: { onlineWindow: opts.onlineWindow, modelsTtl: opts.modelsTtl, grace: opts.noNodeGrace },
      pauseAfter: pauseAfter(opts.sweepInterval),
      quota: { jobs: opts.quotaJobs ?? null, tokens: opts.quotaTokens ?? null },
    });
    this.lifecycle = lifecycle;
    this.watch = new ResultWatch((ids) => finalJobs(db, ids), opts.onError);
    this.dispatcher = new Dispatcher(
      {
        lease: (asks, groups) => lifecycle.lease(asks, groups),
        undeliver: (keyHash) => lifecycle.release({ keyHashes: [keyHash] }, 'released', true),
        abandonOldest: (sessionId) => lifecycle.release({ sessionId, most: 1 }, 'abandoned'),
        queuedModels: async (ids) => {
          const rows = await db.query<{ id: number; jobs: boolean; copies: boolean }>(QUEUED_MODELS, [ids]);
          return { jobs: rows.filter((r) => r.jobs).map((r) => r.id), copies: rows.filter((r) => r.copies).map((r) => r.id) };
        },
      },
      { onError: opts.onError, trackEmpty: opts.trackEmpty, ...(opts.recheck === false ? { recheckMs: 0 } : {}) },
    );
    this.progress = new ProgressRelay(db, lifecycle.server, { lease: opts.leaseTimeout, heartbeat: opts.heartbeatTimeout });
    this.openJobs = new OpenJobs((ids) => standingsOf(db, ids), this.throughput, opts.onError);
    for (const consumer of [this.dispatcher, this.watch, this.progress, this.throughput, this.openJobs]) lifecycle.use(consumer);
    this.submitter = new Submitter(
      db,
      lifecycle,
      opts.handOff === false ? undefined : this.dispatcher,
      (id, owner, model, handed) => this.openJobs.remember(id, owner, { state: handed ? 'leased' : 'queued', model }),
      opts.quotaReserveTokens,
      { onlineWindow: opts.onlineWindow, modelsTtl: opts.modelsTtl },
    );
    this.completer = new Completer(db, lifecycle);
    this.reader = new JobReader(db);
    this.sweeper = new Sweeper(lifecycle, opts.sweepInterval * 1000, opts.onError);
    this.presence = new Presence(db, opts.presenceFlushMs ?? 5_000, opts.onError);
  }

  static async start(db: Database, opts: CoordinatorOptions): Promise<Coordinator> {
    const c = new Coordinator(db, opts);
    c.stopListening = [
      await c.lifecycle.listen(),
      await db.listen(
        PROGRESS_CHANNEL,
        (payload) => c.progress.heard(payload),
        () => {},
      ),
    ];
    return c;
  }

  /** This server's id in announcements. */
  get server(): string {
    return this.lifecycle.server;
  }

  /** Adds a consumer of every job outcome (the verifier, the metrics). */
  use(consumer: LiveConsumer): void {
    this.lifecycle.use(consumer);
  }

  /** Submits a job: its id, and whether its answer is held until checked (checked delivery). */
  submit(s: Submission): Promise<SubmittedJob> {
    return this.submitter.submit(s);
  }

  /** The next job for a worker session, waiting up to waitMs (0: look once). */
  next(session: SessionRow, waitMs: number, gone: () => boolean): Promise<DeliveredJob | null> {
    this.presence.touch(session.id);
    return this.dispatcher.next(session, waitMs, gone);
  }

  /**
   * Up to `max` jobs for a worker session (jobs/next, `ins worker`'s own wire): one look for as
   * many as it asks (one lease round: the dispatcher's waiters of one turn share it), and when
   * that finds none, the wait of a single poll for the first job (waitMs; 0: look once), then one
   * more look for the rest. Never more than the session has room for: no lease it holds is given up.
   */
  async take(session: SessionRow, max: number, waitMs: number, gone: () => boolean): Promise<DeliveredJob[]> {
    if (max <= 0) return [];
    this.presence.touch(session.id);
    // `keep`: asks past the session's capacity get nothing; no lease it holds is given up.
    const look = (n: number) =>
      Promise.all(Array.from({ length: n }, () => this.dispatcher.next(session, 0, gone, true))).then((found) =>
        found.filter((j): j is DeliveredJob => j !== null),
      );
    // A look costs a poll's bookkeeping per job asked (nothing found, when this server knows the
    // session's models empty): skipped then, as a worker's every call would otherwise pay it.
    if (max > 1 && !this.dispatcher.knownEmpty(session)) {
      const found = await look(max);
      if (found.length > 0 || waitMs <= 0) return found;
    }
    const job = await this.dispatcher.next(session, waitMs, gone, true);
    if (!job) return [];
    // A burst woke it: what else the burst queued, in one more look (none when the model is known empty).
    return max > 1 && !this.dispatcher.knownEmpty(session) ? [job, ...(await look(max - 1))] : [job];
  }

  /** Gives back a job whose worker could not be told about it (it hung up): no attempt. */
  undeliver(job: DeliveredJob): Promise<void> {
    return this.lifecycle.release({ keyHashes: [job.keyHash] }, 'released', true);
  }

  /** A session was seen (any call with its token). */
  seen(sessionId: number): void {
    this.presence.touch(sessionId);
  }

  complete(r: JobReport): Promise<Completion> {
    return this.completer.complete(r);
  }

  /** For a node-key report of a job id: see complete.ts nodeLeaseOf. */
  nodeLeaseOf(jobId: string, nodeId: number): Promise<string | null | undefined> {
    return nodeLeaseOf(this.db, jobId, nodeId);
  }

  /** A node was disabled: every lease it holds goes back to the queue. */
  endNodeLeases(nodeId: number): Promise<void> {
    return this.lifecycle.release({ nodeId }, 'released');
  }

  /**
   * The dispatcher as a consumer of the node lifecycle (nodes/lifecycle.ts): the polls of a node
   * that can no longer take jobs, here or announced by another server, answer at once.
   */
  readonly nodes: NodeConsumer = {
    apply: (o: NodeOutcome) => {
      if (endsAccess(o) && o.nodeId !== null)
        this.dispatcher.endPolls(o.nodeId, o.change === 'deregistered' ? (o.sessionId ?? undefined) : undefined);
    },
  };

  /** Cancels a queued or leased job of this owner (null: an operator, any owner). */
  cancel(jobId: string, ownerKeyId: number | null, why: string): Promise<{ before: JobState | undefined; canceled: boolean }> {
    return this.lifecycle.cancel(jobId, ownerKeyId, why);
  }

  /** Resolves once the job reached a final state (as announced), or undefined after timeoutMs or on abort. */
  waitFinal(jobId: string, timeoutMs: number, signal?: AbortSignal): Promise<Finished | undefined> {
    // Stopping: a wait that begins now (a request that came on an open connection) ends at once, as drain() ended the others.
    if (this.drained) return Promise.resolve({});
    return this.watch.wait(jobId, timeoutMs, signal);
  }

  /** A worker's partial output of a streamed job (empty: a heartbeat); false when its lease is not open. */
  publishProgress(keyHash: string, jobId: string, text: string): Promise<boolean> {
    return this.progress.publish(keyHash, jobId, text);
  }

  /** Hears a streamed job's partial output; returns the unsubscribe function. */
  onProgress(jobId: string, fn: (piece: Piece) => void): () => void {
    return this.progress.listen(jobId, fn);
  }

  /** The job if it exists and is this user key's (reads share statements). */
  ownJob(jobId: string, ownerKeyId: number): Promise<UserJob | undefined> {
    return this.reader.own(jobId, ownerKeyId);
  }

  /** Waits until this server's auditor decided the job's delivery, or at most a short while (delivery-watch.ts): then read the job again. */
  waitDelivery(jobId: string, ms: number, signal?: AbortSignal): Promise<void> {
    return this.deliveries.wait(jobId, ms, signal);
  }

  /** The auditor of this server decided these held jobs' deliveries (checked delivery). */
  delivered(jobIds: readonly string[]): void {
    this.deliveries.delivered(jobIds);
  }

  /** Where a job this server knows to be open stands, from memory; undefined: read the job (ownJob). */
  pendingJob(jobId: string, ownerKeyId: number): Standing | undefined {
    return this.openJobs.get(jobId, ownerKeyId);
  }

  /** Where a job this server knows to be open stands, from memory, without counting as a poll (a `wait`, woken by its end); undefined: read it. */
  knownOpen(jobId: string, ownerKeyId: number): Standing | undefined {
    return this.openJobs.peek(jobId, ownerKeyId);
  }

  /** A job read open by a poll: remembered, so that its next polls cost nothing; answers where it stands. */
  seenOpen(job: UserJob, ownerKeyId: number): Standing {
    return this.openJobs.remember(job.id, ownerKeyId, { state: job.state === 'leased' ? 'leased' : 'queued', model: job.modelId }, true);
  }

  /** The answer of a polled job a statement of this server finished as done, once, from memory; undefined: read the job (ownJob). */
  doneJob(jobId: string, ownerKeyId: number): DoneJob | undefined {
    return this.openJobs.takeDone(jobId, ownerKeyId);
  }

  /** Answers of done jobs kept for their pollers (doneJob). */
  get keptAnswers(): number {
    return this.openJobs.doneSize;
  }

  /** Jobs someone on this server waits for (get_result with wait, the OpenAI-compatible API). */
  get waitingResults(): number {
    return this.watch.size;
  }

  get waitingWorkers(): number {
    return this.dispatcher.waiting;
  }

  /** Polls waiting with no look of theirs in flight (jobs/dispatcher.ts idleWaiting). */
  get idleWorkers(): number {
    return this.dispatcher.idleWaiting;
  }

  /** The server is stopping: waits end at once (drain), and a completion woken so cancels its job. */
  get draining(): boolean {
    return this.drained;
  }

  /** Answers every waiting poll now, and any wait that begins later at once (the server is stopping). */
  drain(): void {
    this.drained = true;
    this.dispatcher.close();
    this.watch.wakeAll();
  }

  async close(): Promise<void> {
    this.drain();
    this.openJobs.close();
    this.watch.close();
    await this.sweeper.close();
    await this.presence.close();
    for (const stop of this.stopListening) await stop();
  }
}
