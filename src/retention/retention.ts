// Retention (docs/operations.md, "Retention"): every server looks at start and then every
// `every` seconds; a look runs the statements of ./sql.ts batch after batch, each its own short
// transaction, until a batch comes back short (nothing more is due), another server holds the
// lock (it is pruning: this server stops its look), or the server stops. A failure is reported
// through `error` and the next look tries again; it never escapes.
import type { Database } from '../db/database.js';
import {
  CHECKPOINT,
  PRUNE_CANARIES,
  PRUNE_JOBS,
  PRUNE_LANES,
  PRUNE_RESULTS,
  PRUNE_SESSIONS,
  PRUNE_TOKEN_CHECKS,
  PRUNE_USAGE,
  VACUUM,
} from './sql.js';

export interface RetentionOptions {
  /** JOB_RETENTION in seconds: finished jobs older than this lose their payloads; 0 keeps everything. */
  window: number;
  /** Seconds between looks (and one at start); unset: no automatic looks (tests call prune()). */
  every?: number;
  /** Rows per statement (default 1,000). */
  batch?: number;
  /** Tests: the time retention measures the window from (the database's clock otherwise). */
  now?: () => Date;
}

export interface RetentionReport {
  /** Finished jobs deleted (with their leases). */
  jobs: number;
  leases: number;
  /** Report bodies replaced by their hash. */
  results: number;
  /** Usage counters of past days, idle fair-queue lanes, and worker sessions long unseen, deleted. */
  usage: number;
  lanes: number;
  sessions: number;
  /** Token-level check records judged before the window (the per-node sums stay). */
  tokenChecks: number;
  /** Canary references (a job's request and answer each) kept before the window. */
  canaries: number;
  /** Another server held the lock: this look stopped early. */
  busy: boolean;
}

export interface RetentionEvents {
  pruned: (report: RetentionReport) => void;
  error: (err: unknown) => void;
}

export const DEFAULT_RETENTION_BATCH = 1000;

export class Retention {
  private running: Promise<RetentionReport | undefined> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly db: Database,
    private readonly opts: RetentionOptions,
    private readonly events: RetentionEvents,
  ) {}

  get enabled(): boolean {
    return this.opts.window > 0;
  }

  /** Looks now, then every `everySeconds` (nothing when the window is 0). */
  start(everySeconds: number): void {
    if (!this.enabled) return;
    this.prune().catch(this.events.error);
    this.timer = setInterval(() => {
      this.prune().catch(this.events.error);
    }, everySeconds * 1000);
    this.timer.unref();
  }

  /** One look (the running one, if one is under way); undefined after a failure or when retention is off. */
  prune(): Promise<RetentionReport | undefined> {
    if (this.stopped || !this.enabled) return Promise.resolve(undefined);
    this.running ??= this.look()
      .then(
        (report) => {
          if (pruned(report)) this.events.pruned(report);
          return report;
        },
        (err: unknown) => {
          this.events.error(err);
          return undefined;
        },
      )
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }

  private async look(): Promise<RetentionReport> {
    const report: RetentionReport = { jobs: 0, leases: 0, results: 0, usage: 0, lanes: 0, sessions: 0, tokenChecks: 0, canaries: 0, busy: false };
    const batch = this.opts.batch ?? DEFAULT_RETENTION_BATCH;
    const params = () => [this.opts.now?.().toISOString() ?? null, this.opts.window, batch];
    // Bodies first, then the jobs: both follow time, so each is a walk of its oldest rows.
    for (const [statement, add] of [
      [
        PRUNE_RESULTS,
        (r: Row) => {
          report.results += r.rows;
        },
      ],
      [
        PRUNE_JOBS,
        (r: Row) => {
          report.jobs += r.rows;
          report.leases += r.leases ?? 0;
        },
      ],
      [
        PRUNE_CANARIES,
        (r: Row) => {
          report.canaries += r.rows;
        },
      ],
      [
        PRUNE_USAGE,
        (r: Row) => {
          report.usage += r.rows;
        },
      ],
      [
        PRUNE_LANES,
        (r: Row) => {
          report.lanes += r.rows;
        },
      ],
      [
        PRUNE_SESSIONS,
        (r: Row) => {
          report.sessions += r.rows;
        },
      ],
      [
        PRUNE_TOKEN_CHECKS,
        (r: Row) => {
          report.tokenChecks += r.rows;
        },
      ],
    ] as const) {
      while (!this.stopped) {
        const [row] = await this.db.query<Row>(statement, params());
        if (!row!.locked) {
          report.busy = true;
          return report;
        }
        add(row!);
        if (row!.rows < batch) break;
        // Between batches, the event loop (and the pool) serve requests first.
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    if (this.db.kind === 'pglite' && pruned(report) && !this.stopped) {
      await this.db.query(VACUUM);
      await this.db.query(CHECKPOINT);
    }
    return report;
  }

  async close(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running;
  }
}

interface Row {
  locked: boolean;
  rows: number;
  leases?: number;
}

const pruned = (r: RetentionReport): boolean => r.jobs + r.results + r.usage + r.lanes + r.sessions + r.tokenChecks + r.canaries > 0;
