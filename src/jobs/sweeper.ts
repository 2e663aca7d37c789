// Runs the expiry transition (sql/sweep.ts: leases and deadlines past, jobs no node may take)
// every SWEEP_INTERVAL: one sweep at a time on this server, and one server at a time across
// them (the sweep's advisory lock). A failed sweep is reported and the next tick tries again.
import type { Lifecycle } from './lifecycle.js';

export class Sweeper {
  private readonly timer: NodeJS.Timeout;
  private running: Promise<void> | undefined;

  constructor(lifecycle: Lifecycle, intervalMs: number, onError: (err: unknown) => void) {
    this.timer = setInterval(() => {
      this.running ??= lifecycle
        .sweep()
        .then(() => {}, onError)
        .finally(() => {
          this.running = undefined;
        });
    }, intervalMs);
    this.timer.unref();
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }
}
