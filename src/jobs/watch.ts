// Waiting for jobs to reach a final state, on one server, without polling: whoever waits
// (get_result with `wait`, the OpenAI-compatible API) registers here, and is woken when a
// statement of this server finishes the job — with the job's answer when that statement had
// it, so the waiter need not read it back — or when RESULTS_CHANNEL says another server did.
import type { Answer, Usage } from './answer.js';

/** A job done by a statement of this server: what its owner reads. */
export interface DoneJob { state: 'done'; result: Answer; usage: Usage | null; queuedSeconds: number | null }
/** Woken: the job is final; `done` when this server has its answer at hand. */
export interface Finished { done?: DoneJob }

export class ResultWatch {
  private readonly waiting = new Map<string, Set<(f: Finished) => void>>();

  /** Resolves once the job is final (as announced), or undefined after timeoutMs or on abort. */
  wait(jobId: string, timeoutMs: number, signal?: AbortSignal): Promise<Finished | undefined> {
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
