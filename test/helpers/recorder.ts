// A consumer of a lifecycle's outcomes (jobs/lifecycle.ts, nodes/lifecycle.ts) for tests: it
// records what it is given, and lets a test wait for an outcome.
export interface Seen<O> {
  outcome: O;
  local: boolean;
}

export class Recorder<O> {
  readonly seen: Seen<O>[] = [];
  private waiters: { match: (s: Seen<O>) => boolean; resolve: (s: Seen<O>) => void }[] = [];
  apply(outcome: O, local: boolean): void {
    const s = { outcome, local };
    this.seen.push(s);
    this.waiters = this.waiters.filter((w) => (w.match(s) ? (w.resolve(s), false) : true));
  }
  /** The first outcome (from now, or already seen since `from`) that matches. */
  next(match: (s: Seen<O>) => boolean, from = 0): Promise<Seen<O>> {
    const found = this.seen.slice(from).find(match);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => this.waiters.push({ match, resolve }));
  }
}
