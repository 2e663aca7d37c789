// Days close by themselves: each server looks at start and then every hour (closing takes the
// claim in ledger_state, so with several servers one computes and the rest find nothing to do).
// A failure is reported through onError and retried at the next look; it never escapes.
// A server closes in slices and rests between them (pace.ts): after an import, months of days
// are due at start, and live traffic comes first. Stopping cuts a rest short.
import type { Database } from '../db/database.js';
import { ClosingStopped, closeDueDays, type CloseOptions, type CloseReport } from './close.js';
import type { LedgerKeys } from './keys.js';
import { dutyCycle, SERVER_PACE, type PaceOptions } from './pace.js';

export interface DayCloserEvents {
  closed: (report: CloseReport) => void;
  error: (err: unknown) => void;
}

export class DayCloser {
  private running: Promise<CloseReport | undefined> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  private warnedNoKey = false;
  /** Ends the rest under way, if any (close()). */
  private wake: (() => void) | undefined;

  constructor(
    private readonly db: Database,
    private readonly keys: LedgerKeys,
    private readonly opts: Omit<CloseOptions, 'key' | 'pace'> & {
      /** How the server yields to live traffic while it closes (default SERVER_PACE; null: no rest). */
      pace?: PaceOptions | null;
    },
    private readonly events: DayCloserEvents & {
      /** This server cannot sign (the key lives in another server's LEDGER_KEY_FILE): told once. */
      cannotSign: (keyId: string) => void;
    },
  ) {}

  /** A fresh duty cycle for each look, whose rests stop() cuts short. */
  private pace(): (() => Promise<void>) | undefined {
    if (this.opts.pace === null) return undefined;
    const o = this.opts.pace ?? SERVER_PACE;
    return dutyCycle({
      ...o,
      rest:
        o.rest ??
        ((ms) =>
          new Promise<void>((resolve) => {
            if (this.stopped) return resolve();
            const timer = setTimeout(
              () => {
                this.wake = undefined;
                resolve();
              },
              Math.min(ms, 2 ** 31 - 1),
            );
            this.wake = () => {
              clearTimeout(timer);
              this.wake = undefined;
              resolve();
            };
          })),
    });
  }

  /** Looks now, then every `everySeconds`. */
  start(everySeconds: number): void {
    // closeDue() reports its own failures and never rejects; the catch is for the lint's sake.
    this.closeDue().catch(this.events.error);
    this.timer = setInterval(() => {
      this.closeDue().catch(this.events.error);
    }, everySeconds * 1000);
    this.timer.unref();
  }

  /** Closes the days that are due (the running look, if one is under way); undefined after a failure. */
  closeDue(): Promise<CloseReport | undefined> {
    if (this.stopped) return Promise.resolve(undefined);
    this.running ??= this.keys
      .get()
      .then((key) => {
        if (key.sign) return closeDueDays(this.db, { ...this.opts, key, stopping: () => this.stopped, pace: this.pace() });
        if (!this.warnedNoKey) this.events.cannotSign(key.keyId);
        this.warnedNoKey = true;
        return { closed: [], recomputed: 0, disagreements: [] };
      })
      .then(
        (report) => {
          if (report.closed.length || report.disagreements.length) this.events.closed(report);
          return report;
        },
        (err: unknown) => {
          if (!(err instanceof ClosingStopped)) this.events.error(err);
          return undefined;
        },
      )
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }

  async close(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.wake?.();
    await this.running;
  }
}
