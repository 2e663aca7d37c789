// Verification on one server (docs/verification.md), a consumer of the job lifecycle's outcomes
// (jobs/lifecycle.ts): jobs done here wake the audit (250 ms later, to batch them; once a second
// it also looks for jobs done elsewhere and left unaudited), nodes that gave a job up twice get a
// strike, jobs failed by a node's request-error claim are copied to check the claim, and every few seconds the maintenance round runs (verify/maintenance.ts). Copies and
// probes are queued through the lifecycle, whose outcome is applied once their transaction
// commits. What it finds is told to the metrics (events); strikes, suspensions and probations
// ended, transitions of the node lifecycle (announced by their statements), are applied to that
// lifecycle's consumers here once committed, since sessions and keys are cached with their
// node's standing.
import type { Database, Queryable } from '../db/database.js';
import type { VerifyConfig } from '../config-verify.js';
import type { Outcome } from '../jobs/outcome.js';
import type { LiveConsumer } from '../jobs/lifecycle.js';
import type { NodeOutcome } from '../nodes/outcome.js';
import { AUDIT_BATCH, auditBatch, emptyReport, type AuditReport } from './auditor.js';
import { maintain } from './maintenance.js';
import { strikeGiveUps } from './give-ups.js';
import { strikeFailures } from './failures.js';
import { auditRequestErrors, queueClaimAudits } from './request-errors.js';
import { auditFailedJobs } from './failed-jobs.js';
import type { CheckQueue } from './copies.js';

export interface VerifierEvents {
  audited: (report: AuditReport) => void;
  /** The models probed, and those whose lone node was sent a canary. */
  probed: (models: number[], canaries: number[]) => void;
  /** Points a suspended node earned after its suspension, taken back. */
  reversed: (points: number) => void;
  error: (err: unknown) => void;
}

/** The lifecycle, as verification uses it: queue checks, and apply their outcome once committed. */
export interface JobChecks extends CheckQueue {
  apply(outcome: Outcome): void;
  /** Checked delivery: the held jobs whose delivery a committed batch decided (their waiters on this server read them again). */
  delivered?(jobIds: readonly string[]): void;
}

export interface VerifierOptions {
  verify: VerifyConfig;
  onlineWindow: number;
  modelsTtl: number;
  jobTimeout: number;
  jobs: JobChecks;
  events: VerifierEvents;
  /** The node lifecycle's apply() (nodes/lifecycle.ts): strikes, suspensions and probations ended reach its consumers once committed. */
  nodes: { apply(outcome: NodeOutcome): void; readonly server: string };
}

const FALLBACK_MS = 1_000;

export class Verifier implements LiveConsumer {
  private running: Promise<void> | undefined;
  private scheduled: NodeJS.Timeout | undefined;
  private readonly timers: NodeJS.Timeout[] = [];
  private maintaining: Promise<void> | undefined;
  private striking: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly db: Database,
    private readonly opts: VerifierOptions,
  ) {
    if (!opts.verify.enabled) return;
    const tickSeconds = Math.min(5, opts.verify.probeInterval || 5);
    this.timers.push(
      setInterval(() => this.wake(), FALLBACK_MS),
      setInterval(() => this.maintain(tickSeconds), tickSeconds * 1000),
    );
    for (const t of this.timers) t.unref();
  }

  /**
   * Jobs done by this server's statements are audited shortly; repeated give-ups and failures
   * are struck; request-error claims, and jobs that failed or expired by their nodes' fault,
   * are copied to be audited.
   */
  apply(o: Outcome, local: boolean): void {
    if (!local || this.closed || !this.opts.verify.enabled) return;
    if ([...o.finished.values()].some((f) => f.state === 'done')) this.jobsDone();
    const giveUps = o.local?.repeatGiveUps;
    if (giveUps?.length) {
      this.striking = this.striking
        .then(async () => this.told(await strikeGiveUps(this.db, giveUps, this.opts.verify, this.opts.nodes.server)))
        .catch(this.opts.events.error);
    }
    if (o.local?.nodeFailures?.length) this.strikeFailures(o.local.nodeFailures);
    const claims = o.local?.requestErrors;
    if (claims?.length) this.copyToAudit(() => auditRequestErrors(this.db, claims, { ...this.opts, checks: this.opts.jobs }));
    // Failed and expired jobs (a request's own error among them: the query leaves those to the claims' audit).
    const failed = [...o.finished].filter(([, f]) => f.state === 'failed' || f.state === 'expired').map(([id]) => id);
    if (failed.length > 0 && this.opts.verify.failuresPerStrike > 0)
      this.copyToAudit(() => auditFailedJobs(this.db, failed, { ...this.opts, checks: this.opts.jobs }));
  }

  private strikeFailures(failures: readonly { nodeId: number; jobId: string }[]): void {
    if (this.opts.verify.failuresPerStrike <= 0) return;
    this.striking = this.striking
      .then(async () => this.told(await strikeFailures(this.db, failures, this.opts.verify, this.opts.nodes.server)))
      .catch(this.opts.events.error);
  }

  /**
   * Request-error claims audited inside the completion that took them (jobs/lifecycle.ts
   * ClaimAudit, wired by service.ts): their copies commit with the claims. The caller applies
   * the outcome once committed. (Counted in the report now: a rollback, rare, overcounts.)
   */
  async auditClaims(tx: Queryable, claims: readonly { nodeId: number; jobId: string }[]): Promise<Outcome | undefined> {
    if (this.closed || !this.opts.verify.enabled || claims.length === 0) return undefined;
    const { outcome, copies } = await queueClaimAudits(tx, claims, { ...this.opts, checks: this.opts.jobs });
    if (copies > 0) this.told({ ...emptyReport(), copies, outcomes: [] });
    return outcome;
  }

  private copyToAudit(audit: () => Promise<{ outcome: Outcome | undefined; copies: number }>): void {
    this.striking = this.striking
      .then(async () => {
        const { outcome, copies } = await audit();
        this.told({ ...emptyReport(), copies, outcomes: outcome ? [outcome] : [] });
      })
      .catch(this.opts.events.error);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.scheduled);
    for (const t of this.timers) clearInterval(t);
    await this.running;
    await this.maintaining;
    await this.striking;
  }

  private jobsDone(): void {
    if (this.scheduled) return;
    this.scheduled = setTimeout(() => {
      this.scheduled = undefined;
      this.wake();
    }, this.opts.verify.auditDelay * 1000);
  }

  private wake(): void {
    if (this.closed || this.running) return;
    this.running = this.drain()
      .catch(this.opts.events.error)
      .finally(() => {
        this.running = undefined;
      });
  }

  private async drain(): Promise<void> {
    // A full batch means more are waiting; a partial one, that the next wake will do.
    for (;;) {
      const report = await auditBatch(this.db, { ...this.opts, checks: this.opts.jobs, server: this.opts.nodes.server });
      if (!report) return;
      this.told(report);
      if (this.closed || report.audited + report.setAside.length < AUDIT_BATCH) return;
    }
  }

  /** A committed batch's findings: copies to hand out, the metrics, suspensions announced. */
  private told(report: AuditReport): void {
    for (const outcome of report.outcomes) this.opts.jobs.apply(outcome);
    if (report.delivered?.length) this.opts.jobs.delivered?.(report.delivered);
    this.opts.events.audited(report);
    // The strikes and agreements were announced as the node lifecycle's own (nodes/sql/standing.ts),
    // which it therefore does not hear: their statements' outcomes are applied here, and counted
    // once, by this server (issue 53).
    for (const outcome of report.nodes) this.opts.nodes.apply(outcome);
    if (report.nodeFailures.length > 0 && !this.closed) this.strikeFailures(report.nodeFailures);
  }

  private maintain(tickSeconds: number): void {
    if (this.closed || this.maintaining) return;
    this.maintaining = maintain(this.db, { ...this.opts, tickSeconds, checks: this.opts.jobs })
      .then((r) => {
        if (r?.outcome) this.opts.jobs.apply(r.outcome);
        if (r?.probed.length || r?.canaries.length) this.opts.events.probed(r.probed, r.canaries);
        if (r?.reversed) this.opts.events.reversed(r.reversed);
      }, this.opts.events.error)
      .finally(() => {
        this.maintaining = undefined;
      });
  }
}
