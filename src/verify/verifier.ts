// Verification on one server (docs/verification.md): audits of done jobs in batches (jobs done
// here wake it, 250 ms later; once a second it also looks for jobs done elsewhere and left unaudited), and
// every few seconds the maintenance round (verify/maintenance.ts). What they find is told to
// the metrics and to the coordinator (copies and probes are jobs to hand out).
import type { Database } from '../db/database.js';
import type { VerifyConfig } from '../config-verify.js';
import { AUDIT_BATCH, auditBatch, type AuditReport } from './auditor.js';
import { maintain } from './maintenance.js';

export interface VerifierEvents {
  audited: (report: AuditReport) => void;
  probed: (models: number[]) => void;
  /** Points a suspended node earned after its suspension, taken back. */
  reversed: (points: number) => void;
  error: (err: unknown) => void;
}

export interface VerifierOptions { verify: VerifyConfig; server: string; onlineWindow: number; modelsTtl: number; jobTimeout: number; events: VerifierEvents }

/** How long done jobs gather before an audit: batches, not a statement per job. */
const AUDIT_DELAY_MS = 250;
const FALLBACK_MS = 1_000;

export class Verifier {
  private running: Promise<void> | undefined;
  private scheduled: NodeJS.Timeout | undefined;
  private readonly timers: NodeJS.Timeout[] = [];
  private maintaining: Promise<void> | undefined;
  private closed = false;

  constructor(private readonly db: Database, private readonly opts: VerifierOptions) {
    if (!opts.verify.enabled) return;
    const tickSeconds = Math.min(5, opts.verify.probeInterval || 5);
    this.timers.push(setInterval(() => this.wake(), FALLBACK_MS), setInterval(() => this.maintain(tickSeconds), tickSeconds * 1000));
    for (const t of this.timers) t.unref();
  }

  /** Jobs were done here: audit them shortly. */
  jobsDone(): void {
    if (this.closed || !this.opts.verify.enabled || this.scheduled) return;
    this.scheduled = setTimeout(() => {
      this.scheduled = undefined;
      this.wake();
    }, AUDIT_DELAY_MS);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.scheduled);
    for (const t of this.timers) clearInterval(t);
    await this.running;
    await this.maintaining;
  }

  private wake(): void {
    if (this.closed || this.running) return;
    this.running = this.drain().catch(this.opts.events.error).finally(() => { this.running = undefined; });
  }

  private async drain(): Promise<void> {
    // A full batch means more are waiting; a partial one, that the next wake will do.
    for (;;) {
      const report = await auditBatch(this.db, this.opts);
      if (!report) return;
      this.opts.events.audited(report);
      if (this.closed || report.audited < AUDIT_BATCH) return;
    }
  }

  private maintain(tickSeconds: number): void {
    if (this.closed || this.maintaining) return;
    this.maintaining = maintain(this.db, { ...this.opts, tickSeconds })
      .then((r) => {
        if (r?.probed.length) this.opts.events.probed(r.probed);
        if (r?.reversed) this.opts.events.reversed(r.reversed);
      }, this.opts.events.error)
      .finally(() => { this.maintaining = undefined; });
  }
}
