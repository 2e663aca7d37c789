// Waiting for jobs to reach a final state, on one server, without polling: whoever waits
// (get_result with `wait`, the OpenAI-compatible API) registers here, and is woken by the
// lifecycle's outcome that finishes the job — with the job's answer when a statement of this
// server finished it, so the waiter need not read it back — or by another server's announcement.
// While announcements may be missed (LISTEN down, or never up behind a transaction pooler
// without DATABASE_DIRECT_URL), the waited-for jobs are looked up once a second, and once more
// when LISTEN is back: those found final are woken.
import type { DoneJob, Outcome } from './outcome.js';
import type { LiveConsumer } from './lifecycle.js';

/** Woken: the job is final; `done` when this server has its answer at hand. */
export interface Finished {
  done?: DoneJob;
}

/** Which of these jobs are final (one statement). */
export type FinalOf = (jobIds: string[]) => Promise<string[]>;

const RECHECK_MS = 1_000;

export class ResultWatch implements LiveConsumer {
  private readonly waiting = new Map<string, Set<(f: Finished) => void>>();
  private timer: NodeJS.Timeout | undefined;
  private checking: Promise<void> | undefined;

  constructor(
    private readonly finalOf: FinalOf,
    private readonly onError: (err: unknown) => void,
  ) {}

  apply(o: Outcome): void {
    if (o.finished.size > 0) this.finished(o.finished.keys(), o.local?.done);
  }

  setLive(live: boolean): void {
    clearInterval(this.timer);
    this.timer = undefined;
    if (!live) {
      this.timer = setInterval(() => this.check(), RECHECK_MS);
      this.timer.unref();
    }
    this.check();
  }

  close(): void {
    clearInterval(this.timer);
  }

  /** Wakes the waiters of the waited-for jobs that are final by now. */
  private check(): void {
    if (this.checking || this.waiting.size === 0) return;
    this.checking = this.finalOf([...this.waiting.keys()])
      .then((ids) => this.finished(ids), this.onError)
      .finally(() => {
        this.checking = undefined;
      });
  }

  /** Resolves once the job is final (as announced), or undefined after timeoutMs or on abort. */
  wait(jobId: string, timeoutMs: number, signal?: AbortSignal): Promise<Finished | undefined> {
    // Aborted already (a client that hung up while its job was being submitted): an abort
    // listener added now would never fire, and the waiter would sit out the whole deadline.
    if (signal?.aborted) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      let set = this.waiting.get(jobId);
      if (!set) this.waiting.set(jobId, (set = new Set()));
      const done = (f: Finished | undefined) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', abort);
        set.delete(wake);
        if (set.size === 0 && this.waiting.get(jobId) === set) this.waiting.delete(jobId);
        resolve(f);
      };
      const wake = (f: Finished) => done(f);
      const abort = () => done(undefined);
      const timer = setTimeout(() => done(undefined), timeoutMs);
      signal?.addEventListener('abort', abort, { once: true });
      set.add(wake);
    });
  }

  /** These jobs reached a final state; `done` holds the answers this server has at hand. */
  finished(jobIds: Iterable<string>, done?: ReadonlyMap<string, DoneJob>): void {
    for (const id of jobIds) {
      const set = this.waiting.get(id);
      if (!set) continue;
      const f: Finished = done?.has(id) ? { done: done.get(id)! } : {};
      for (const wake of [...set]) wake(f);
    }
  }

  /** Notifications may have been missed: every waiter looks again. */
  wakeAll(): void {
    this.finished([...this.waiting.keys()]);
  }

  get size(): number {
    return this.waiting.size;
  }
}
