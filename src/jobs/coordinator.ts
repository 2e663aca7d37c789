// The coordinator of one server: submissions, dispatch to waiting workers, completions, lease
// expiry and deadlines, and the notifications that keep several servers in step
// (jobs/channels.ts). The routes call this; the parts live in the files beside it.
import { randomBytes } from 'node:crypto';
import type { Database } from '../db/database.js';
import type { CoordinatorConfig } from '../config.js';
import type { SessionRow } from '../repositories/sessions.js';
import { jobsAndCopies, JOBS_CHANNEL, parsePayload, RESULTS_CHANNEL } from './channels.js';
import { Submitter, type Submission } from './submit.js';
import { Dispatcher, type DeliveredJob } from './dispatcher.js';
import { leaseJobs, releaseLeases, type Requeued } from './lease.js';
import { Completer, nodeLeaseOf, type Completion, type JobReport } from './complete.js';
import { Sweeper, type SweepResult } from './sweeper.js';
import { ResultWatch, type Finished } from './watch.js';
import { JobReader, type UserJob } from './read.js';
import { PROGRESS_CHANNEL, ProgressRelay } from './progress.js';
import { Presence } from './presence.js';
import { cancelQueuedJob } from './cancel.js';
import { sql } from '../db/database.js';
import type { JobState } from './states.js';

/** What the coordinator tells the metrics (http/metrics.ts). */
export interface CoordinatorEvents {
  leased: (queuedSeconds: number) => void;
  finished: (state: JobState, count: number) => void;
  leasesExpired: (count: number) => void;
  error: (err: unknown) => void;
}

export interface CoordinatorOptions extends CoordinatorConfig {
  defaultPointsPerJob: number;
  /** Done jobs are audited (verification on). */
  audit: boolean;
  events: CoordinatorEvents;
  /** How often session last-seen times are written. */
  presenceFlushMs?: number;
}

// Of the models $1, which have queued jobs, and which queued copies (one EXISTS per partial index).
const QUEUED_MODELS = sql('jobs_queued_models', `SELECT m.id,
    EXISTS (SELECT 1 FROM jobs j WHERE j.state = 'queued' AND j.verify_of IS NULL AND j.model_id = m.id AND j.deadline_at > now()) AS jobs,
    EXISTS (SELECT 1 FROM jobs j WHERE j.state = 'queued' AND j.verify_of IS NOT NULL AND j.model_id = m.id AND j.deadline_at > now()) AS copies
  FROM unnest($1::int[]) AS m(id)`);

export class Coordinator {
  /** This server's id in notifications: it skips its own. */
  readonly server = randomBytes(6).toString('hex');
  private readonly submitter: Submitter;
  private readonly dispatcher: Dispatcher;
  private readonly completer: Completer;
  private readonly sweeper: Sweeper;
  private readonly watch = new ResultWatch();
  private readonly presence: Presence;
  private readonly reader: JobReader;
  private readonly progress: ProgressRelay;
  private stopListening: (() => Promise<void>)[] = [];

  private constructor(private readonly db: Database, private readonly opts: CoordinatorOptions) {
    const { events } = opts;
    this.dispatcher = new Dispatcher({
      lease: (asks, groups) => leaseJobs(db, asks, groups, opts.leaseTimeout),
      undeliver: async (keyHash) => this.requeued(await releaseLeases(db, { keyHashes: [keyHash] }, 'released', true, opts.maxAttempts, this.server)),
      abandonOldest: async (sessionId) => this.requeued(await releaseLeases(db, { sessionId, most: 1 }, 'abandoned', false, opts.maxAttempts, this.server)),
      queuedModels: async (ids) => {
        const rows = await db.query<{ id: number; jobs: boolean; copies: boolean }>(QUEUED_MODELS, [ids]);
        return { jobs: rows.filter((r) => r.jobs).map((r) => r.id), copies: rows.filter((r) => r.copies).map((r) => r.id) };
      },
    }, { onError: events.error });
    this.progress = new ProgressRelay(db, this.server);
    this.submitter = new Submitter(db, this.server, opts.leaseTimeout, {
      claim: (counts) => this.dispatcher.claim(counts),
      settleClaim: (claim, job) => this.dispatcher.settleClaim(claim, job),
      queued: (counts) => this.dispatcher.queued(counts),
    });
    this.completer = new Completer(db, { defaultPoints: opts.defaultPointsPerJob, maxAttempts: opts.maxAttempts, server: this.server, audit: opts.audit }, (queued, finished, done, ended) => {
      this.dispatcher.queued(queued);
      this.watch.finished(finished, done);
      this.progress.ended(ended);
    });
    this.reader = new JobReader(db);
    this.sweeper = new Sweeper(db, opts.sweepInterval * 1000, opts.maxAttempts, this.server, (r) => this.swept(r), events.error);
    this.presence = new Presence(db, opts.presenceFlushMs ?? 5_000, events.error);
  }

  static async start(db: Database, opts: CoordinatorOptions): Promise<Coordinator> {
    const c = new Coordinator(db, opts);
    c.stopListening = [
      await db.listen(JOBS_CHANNEL, (payload) => {
        const p = parsePayload(payload);
        if (p.server === c.server) return;
        const { jobs, copies } = jobsAndCopies(p.items);
        c.dispatcher.queued(jobs);
        c.dispatcher.queued(copies, 'copies');
      }, (live) => c.dispatcher.setLive(live)),
      await db.listen(RESULTS_CHANNEL, (payload) => {
        const p = parsePayload(payload);
        if (p.server !== c.server) c.watch.finished(p.items);
      }, (live) => { if (live) c.watch.wakeAll(); }),
      await db.listen(PROGRESS_CHANNEL, (payload) => c.progress.heard(payload), () => {}),
    ];
    return c;
  }

  submit(s: Submission): Promise<string> {
    return this.submitter.submit(s);
  }

  /** The next job for a worker session, waiting up to waitMs (0: look once). */
  async next(session: SessionRow, waitMs: number, gone: () => boolean): Promise<DeliveredJob | null> {
    this.presence.touch(session.id);
    const job = await this.dispatcher.next(session, waitMs, gone);
    if (job) this.opts.events.leased(job.queuedSeconds);
    return job;
  }

  /** Gives back a job whose worker could not be told about it (it hung up). */
  async undeliver(job: DeliveredJob): Promise<void> {
    this.requeued(await releaseLeases(this.db, { keyHashes: [job.keyHash] }, 'released', true, this.opts.maxAttempts, this.server));
  }

  /** A session was seen (any call with its token). */
  seen(sessionId: number): void {
    this.presence.touch(sessionId);
  }

  async complete(r: JobReport): Promise<Completion> {
    const c = await this.completer.complete(r);
    if (c.kind === 'completed' && c.state !== 'queued') this.opts.events.finished(c.state, 1);
    return c;
  }

  /** For a node-key report of a job id: see complete.ts nodeLeaseOf. */
  nodeLeaseOf(jobId: string, nodeId: number): Promise<string | null | undefined> {
    return nodeLeaseOf(this.db, jobId, nodeId);
  }

  /** A session ends (deregister): its leases go back to the queue at once. */
  async endSession(sessionId: number): Promise<void> {
    this.requeued(await releaseLeases(this.db, { sessionId }, 'released', false, this.opts.maxAttempts, this.server));
  }

  async cancel(jobId: string, ownerKeyId: number | null, why: string): Promise<boolean> {
    const canceled = await cancelQueuedJob(this.db, jobId, ownerKeyId, why, this.server);
    if (canceled) {
      this.watch.finished([jobId]);
      this.opts.events.finished('canceled', 1);
    }
    return canceled;
  }

  /** Resolves once the job reached a final state (as announced), or undefined after timeoutMs or on abort. */
  waitFinal(jobId: string, timeoutMs: number, signal?: AbortSignal): Promise<Finished | undefined> {
    return this.watch.wait(jobId, timeoutMs, signal);
  }

  /** A worker's partial output of a streamed job (jobs/progress.ts); false when its lease is not open. */
  publishProgress(keyHash: string, jobId: string, delta: string): Promise<boolean> {
    return this.progress.publish(keyHash, jobId, delta);
  }

  /** Hears a streamed job's partial output; returns the unsubscribe function. */
  onProgress(jobId: string, fn: (delta: string) => void): () => void {
    return this.progress.listen(jobId, fn);
  }

  /** The job if it exists and is this user key's (reads share statements). */
  ownJob(jobId: string, ownerKeyId: number): Promise<UserJob | undefined> {
    return this.reader.own(jobId, ownerKeyId);
  }

  /** Jobs were queued by another part of this server (probes), or copies of jobs to check (src/verify/). */
  jobsQueued(counts: Map<number, number>, what: 'jobs' | 'copies' = 'jobs'): void {
    this.dispatcher.queued(counts, what);
  }

  get waitingWorkers(): number {
    return this.dispatcher.waiting;
  }

  /** Answers every waiting poll now (the server is stopping). */
  drain(): void {
    this.dispatcher.close();
    this.watch.wakeAll();
  }

  async close(): Promise<void> {
    this.drain();
    await this.sweeper.close();
    await this.presence.close();
    for (const stop of this.stopListening) await stop();
  }

  private requeued(r: Requeued): void {
    this.dispatcher.queued(r.queued);
    this.watch.finished(r.ended);
    if (r.ended.length > 0) this.opts.events.finished('failed', r.ended.length);
  }

  private swept(r: SweepResult): void {
    this.dispatcher.queued(r.queued);
    this.watch.finished(r.finished);
    if (r.leasesEnded > 0) this.opts.events.leasesExpired(r.leasesEnded);
    if (r.expired > 0) this.opts.events.finished('expired', r.expired);
    if (r.failed > 0) this.opts.events.finished('failed', r.failed);
  }
}
