// The job lifecycle: every state change of a job runs here, as one named statement of
// src/jobs/sql/ (one file each: submit, lease, release, complete, sweep, cancel, queue checks),
// and every statement's outcome (jobs/outcome.ts) goes through one function, apply(), to every
// consumer of this server — the dispatcher, the result watch, the progress relay, the verifier,
// the metrics — whichever transition produced it, here or, through NOTIFY ins_jobs, on another
// server. The states and their diagram: jobs/states.ts.
import { randomBytes } from 'node:crypto';
import type { Database, Queryable } from '../db/database.js';
import { JOBS_CHANNEL, parsePayload, type Outcome, type OutcomeConsumer } from './outcome.js';
import { submitJobs, type QuotaDefaults, type Refusal, type SubmitRow } from './sql/submit.js';
import { leaseJobs, type Ask, type Group, type LeaseRound } from './sql/lease.js';
import { releaseLeases, type GiveUp, type ReleaseWhich } from './sql/release.js';
import { completeJobs, type CompleteOptions, type Completed, type JobReport } from './sql/complete.js';
import { sweep, type Stranding } from './sql/sweep.js';
import { cancelJob } from './sql/cancel.js';
import { queueChecks, type Check } from './sql/queue-checks.js';
import type { JobState } from './states.js';

/** A consumer that also hears whether notifications are reliable (LISTEN live): what it trusts from memory must follow. */
export interface LiveConsumer extends OutcomeConsumer {
  setLive?(live: boolean): void;
}

export interface LifecycleOptions {
  maxAttempts: number;
  /** Seconds a lease lasts (never past the job's deadline). */
  leaseTimeout: number;
  /** Points of a success for models without their own points_per_job. */
  defaultPoints: number;
  /** VERIFY_CHECK_PRICE: a score check's points per token scored, as a share of the answer's (sql/complete.ts). */
  checkPrice: number;
  /** Done jobs wait for the auditor (verification on). */
  audit: boolean;
  /** When the sweep fails a queued job because no node that may take it remains (sql/sweep.ts). */
  stranding: Stranding;
  /** Seconds between two sweeps past which the time between them is given back to open leases (sql/sweep.ts PAUSE). */
  pauseAfter: number;
  /** The daily quotas of user keys without their own (null: none). */
  quota?: QuotaDefaults;
  /** A consumer failed: it is logged and counted; the others still get the outcome. */
  onError: (err: unknown) => void;
}

/**
 * Verification's audit of request-error claims (verify/request-errors.ts), run inside the
 * completion's own transaction for the claims it took: a claim and its audit's copy commit
 * together (issue 53; before, the copy was queued after the commit, and a server that stopped
 * in between lost it). Answers the outcome of what it queued.
 */
export type ClaimAudit = (tx: Queryable, claims: readonly { nodeId: number; jobId: string }[]) => Promise<Outcome | undefined>;

export class Lifecycle {
  /** This server's id in announcements: it skips its own, having applied them already. */
  readonly server = randomBytes(6).toString('hex');
  private readonly consumers: LiveConsumer[] = [];
  private readonly completeOptions: CompleteOptions;

  private claimAudit: ClaimAudit | undefined;

  constructor(
    readonly db: Database,
    private readonly opts: LifecycleOptions,
  ) {
    this.completeOptions = {
      defaultPoints: opts.defaultPoints,
      checkPrice: opts.checkPrice,
      maxAttempts: opts.maxAttempts,
      server: this.server,
      audit: opts.audit,
    };
  }

  /** Adds a consumer of every outcome from now on. */
  use(consumer: LiveConsumer): void {
    this.consumers.push(consumer);
  }

  /** The one way an outcome reaches the consumers; `local`: this server's statement made it. */
  apply(outcome: Outcome, local = true): void {
    for (const c of this.consumers) {
      try {
        c.apply(outcome, local);
      } catch (err) {
        this.opts.onError(err);
      }
    }
  }

  /** Hears every server's announcements; resolves to the stop function. */
  listen(): Promise<() => Promise<void>> {
    return this.db.listen(
      JOBS_CHANNEL,
      (payload) => {
        const { server, outcome } = parsePayload(payload);
        if (server !== this.server) this.apply(outcome, false);
      },
      (live) => {
        for (const c of this.consumers) c.setLive?.(live);
      },
    );
  }

  /** Submits the jobs: which were handed to a waiting worker, and which were not taken (over their owner's quota, or to submit again). */
  /** `held`: the jobs whose answer waits for a check (checked delivery, states.ts DELIVERY_STATES). */
  async submit(rows: readonly SubmitRow[]): Promise<{ handed: Set<string>; held: Set<string>; refused: Map<string, Refusal> }> {
    const { handed, held, refused, outcome } = await submitJobs(this.db, rows, this.opts.leaseTimeout, this.server, this.opts.quota);
    this.apply(outcome);
    return { handed, held, refused };
  }

  async lease(asks: readonly Ask[], groups: readonly Group[]): Promise<LeaseRound> {
    const round = await leaseJobs(this.db, asks, groups, this.opts.leaseTimeout);
    const leased = round.rows.flatMap((r) => ('jobId' in r ? [r.queuedSeconds] : []));
    if (leased.length > 0) this.apply({ queued: new Map(), copies: new Map(), finished: new Map(), requeuedLeases: new Map(), local: { leased } });
    return round;
  }

  async release(which: ReleaseWhich, outcome: GiveUp, undelivered = false): Promise<void> {
    this.apply(await releaseLeases(this.db, which, outcome, undelivered, this.server));
  }

  async complete(reports: readonly JobReport[]): Promise<Map<string, Completed>> {
    const audit = this.claimAudit;
    // Only a batch with a request-error claim takes a transaction: the others stay one statement.
    if (!audit || !reports.some((r) => r.requestError)) {
      const { completed, outcome } = await completeJobs(this.db, reports, this.completeOptions);
      this.apply(outcome);
      return completed;
    }
    const { completed, outcome, audited } = await this.db.transaction(async (tx) => {
      const done = await completeJobs(tx, reports, this.completeOptions);
      const claims = done.outcome.local?.requestErrors;
      return { ...done, audited: claims?.length ? await audit(tx, claims) : undefined };
    });
    // Audited already: the consumers are not to copy these claims again.
    if (outcome.local?.requestErrors) delete outcome.local.requestErrors;
    this.apply(outcome);
    if (audited) this.apply(audited);
    return completed;
  }

  /** Audits request-error claims inside the completions that take them (verification on: service.ts). */
  auditClaimsWith(audit: ClaimAudit): void {
    this.claimAudit = audit;
  }

  /** One sweep of expired leases, deadlines and jobs no node may take; false when another server was sweeping. */
  async sweep(): Promise<boolean> {
    const outcome = await sweep(this.db, this.opts.maxAttempts, this.server, this.opts.stranding, this.opts.pauseAfter);
    if (outcome) this.apply(outcome);
    return outcome !== undefined;
  }

  /** Cancels a queued or leased job (of this owner; null: an operator). Answers the state it had, and whether it is canceled now. */
  async cancel(jobId: string, ownerKeyId: number | null, why: string): Promise<{ before: JobState | undefined; canceled: boolean }> {
    // A job leased or finished between the statement's snapshot and its locks is looked at again.
    for (let i = 0; ; i++) {
      const r = await cancelJob(this.db, jobId, ownerKeyId, why, this.server);
      this.apply(r.outcome);
      if (r.canceled || r.before === undefined || (r.before !== 'queued' && r.before !== 'leased') || i >= 2) return r;
    }
  }

  /**
   * Queues verification's checks inside the caller's transaction; the caller applies the outcome
   * (apply()) once that commits.
   */
  queueChecks(tx: Queryable, checks: readonly Check[], deadlineSeconds: number): Promise<Outcome> {
    return queueChecks(tx, checks, deadlineSeconds, this.server);
  }
}
