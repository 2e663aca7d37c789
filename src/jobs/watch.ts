// Waiting for jobs to reach a final state, on one server, without polling: whoever waits
// (get_result with `wait`, the OpenAI-compatible API) registers here, and is woken when a
// statement of this server finishes the job, or when RESULTS_CHANNEL says another did.
export class ResultWatch {
  private readonly waiting = new Map<string, Set<() => void>>();

  /** Resolves true once the job is final (as announced), false after timeoutMs or on abort. */
  wait(jobId: string, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    return new Promise((resolve) => {
      let set = this.waiting.get(jobId);
      if (!set) this.waiting.set(jobId, (set = new Set()));
      const done = (final: boolean) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', abort);
        set.delete(wake);
        if (set.size === 0 && this.waiting.get(jobId) === set) this.waiting.delete(jobId);
        resolve(final);
      };
      const wake = () => done(true);
      const abort = () => done(false);
      const timer = setTimeout(() => done(false), timeoutMs);
      signal?.addEventListener('abort', abort, { once: true });
      set.add(wake);
    });
  }

  /** These jobs reached a final state. */
  finished(jobIds: Iterable<string>): void {
    for (const id of jobIds) for (const wake of [...(this.waiting.get(id) ?? [])]) wake();
  }

  /** Notifications may have been missed: every waiter looks again. */
  wakeAll(): void {
    this.finished([...this.waiting.keys()]);
  }

  get size(): number {
    return this.waiting.size;
  }
}
