// When each worker session was last seen (any call with its token), kept in memory and
// written every few seconds in one statement, not once per poll: thousands of workers
// polling every few seconds would otherwise be thousands of writes a second.
import type { Database } from '../db/database.js';
import { touchSessions } from '../nodes/sql/sessions.js';

export class Presence {
  private seen = new Map<number, Date>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly db: Database,
    flushMs: number,
    private readonly onError: (err: unknown) => void,
  ) {
    this.timer = setInterval(() => {
      this.flush().catch(onError);
    }, flushMs);
    this.timer.unref();
  }

  touch(sessionId: number): void {
    this.seen.set(sessionId, new Date());
  }

  async flush(): Promise<void> {
    if (this.seen.size === 0) return;
    const batch = this.seen;
    this.seen = new Map();
    try {
      await touchSessions(this.db, batch);
    } catch (err) {
      this.onError(err);
    }
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }
}
