// Settling token usage (src/usage/sql.ts): every server looks about once a second; a look runs
// the settle statement batch after batch (rows of usage_owed, each standing for one or more
// finished jobs) until a batch comes back short (nothing more is owed),
// another server holds the lock (it is settling: this look stops), or the server stops. Until a
// finished job is settled its reservation stays counted, so a quota is never exceeded meanwhile;
// its tokens come back within about a second. A failure is reported through `error` and the
// next look tries again; it never escapes.
import { keyUsage, type KeyUsage } from '../repositories/api-keys.js';
import type { Database } from '../db/database.js';
import { SETTLE, VACUUM_OWED } from './sql.js';

export interface SettlerEvents {
  error: (err: unknown) => void;
}

/** Rows of usage_owed per statement. */
export const SETTLE_BATCH = 1000;

/** The least time between two vacuums of usage_owed by this server's settler. */
export const VACUUM_OWED_MS = 60_000;

export interface SettleReport {
  /** Finished jobs whose usage was folded into key_usage (each once). */
  jobs: number;
  /** Another server held the lock: this look stopped early. */
  busy: boolean;
}

export class Settler {
  private queued: Promise<SettleReport | undefined> | undefined;
  private last: Promise<unknown> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private vacuumedAt = -Infinity;

  constructor(
    private readonly db: Database,
    private readonly events: SettlerEvents,
    private readonly batch = SETTLE_BATCH,
    private readonly vacuumEveryMs = VACUUM_OWED_MS,
  ) {}

  /** A user key's usage today (UTC) against its daily quotas (`defaults`: the server's, for a key with none of its own); undefined: no such key. */
  today(keyId: number, defaults: { jobs: number | null; tokens: number | null }): Promise<KeyUsage | undefined> {
    return keyUsage(this.db, keyId, defaults);
  }

  /** Looks now, then every `everySeconds`; a look still waiting to run is not doubled. */
  start(everySeconds: number): void {
    const look = () => {
      if (!this.queued) this.settle().catch(this.events.error);
    };
    look();
    this.timer = setInterval(look, everySeconds * 1000);
    this.timer.unref();
  }

  /**
   * A look that starts after every look asked for before it ends, so that it sees every job
   * finished before the call (tests: the usage after a report). Undefined after a failure.
   */
  settle(): Promise<SettleReport | undefined> {
    if (this.stopped) return Promise.resolve(undefined);
    this.queued ??= (async () => {
      await this.last;
      this.queued = undefined;
      return this.look();
    })().then(
      (r) => r,
      (err: unknown) => {
        this.events.error(err);
        return undefined;
      },
    );
    const mine = this.queued;
    this.last = mine;
    return mine;
  }

  private async look(): Promise<SettleReport> {
    const report: SettleReport = { jobs: 0, busy: false };
    while (!this.stopped) {
      const [row] = await this.db.query<{ locked: boolean; rows: number; jobs: number }>(SETTLE, [this.batch]);
      if (!row!.locked) return { ...report, busy: true };
      report.jobs += row!.jobs;
      if (row!.rows < this.batch) break;
      // Between batches, the event loop (and the pool) serve requests first.
      await new Promise((resolve) => setImmediate(resolve));
    }
    // The rows this look deleted keep their line pointers until a VACUUM, and the statement scans
    // the table whole: without one it would grow by a page per few hundred rows. PGlite runs no
    // autovacuum, and a PostgreSQL may run with it off (docs/operations.md): the settler does not
    // count on it. A table of a second's rows takes milliseconds to vacuum.
    if (report.jobs > 0 && !this.stopped && performance.now() - this.vacuumedAt >= this.vacuumEveryMs) {
      this.vacuumedAt = performance.now();
      await this.db.query(VACUUM_OWED);
    }
    return report;
  }

  async close(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.last;
  }
}
