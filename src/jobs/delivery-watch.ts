// Waiting for a held answer's delivery to be decided (checked delivery, states.ts
// DELIVERY_STATES): the front door of a held job, once the job is done, waits here until the
// auditor checked its answer. The auditor of this server wakes its waiters as soon as its batch
// commits (verify/verifier.ts); a check judged on another server is seen by the waiter's next
// look, at most RECHECK_MS later (no announcement carries deliveries: they are rare, and a held
// answer waits for a whole check job anyway, hundreds of milliseconds at least).

/** How long a waiter waits before it reads its job again, when no wake came. */
export const RECHECK_MS = 250;

export class DeliveryWatch {
  private readonly waiting = new Map<string, Set<() => void>>();

  /** Resolves when woken for the job, after `ms` (at most RECHECK_MS), or on abort: the caller reads the job again. */
  wait(jobId: string, ms: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      let set = this.waiting.get(jobId);
      if (!set) this.waiting.set(jobId, (set = new Set()));
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        set.delete(done);
        if (set.size === 0 && this.waiting.get(jobId) === set) this.waiting.delete(jobId);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, Math.min(ms, RECHECK_MS)));
      signal?.addEventListener('abort', done, { once: true });
      set.add(done);
    });
  }

  /** The deliveries of these jobs were decided (a batch of this server's auditor committed). */
  delivered(jobIds: Iterable<string>): void {
    for (const id of jobIds) for (const wake of [...(this.waiting.get(id) ?? [])]) wake();
  }
}
