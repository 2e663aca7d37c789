// Closing history yields to live traffic (issue 30): a server that starts after an import has
// months of days to close, and closing at full speed took the CPU that update_result and the
// job cycle needed (a third to a half of their steady rate for the first seconds). So a server
// closes in slices: it works for a slice (its own CPU and the statements it waits for, which
// are PostgreSQL's CPU), then rests `restRatio` times as long before the next one, at most
// 1 / (1 + restRatio) of the time. `ins ledger close` runs unpaced: the operator asked for it.
// The pace is asked between steps that hold no lock and no transaction (close.ts).

export interface PaceOptions {
  /** Work this long (ms, wall time) before resting. */
  sliceMs: number;
  /** Rest this many times the slice's length. */
  restRatio: number;
  /** Tests: the clock and the rest, so that a test counts rests instead of waiting for them. */
  now?: () => number;
  rest?: (ms: number) => Promise<void>;
  /** Tests: told when a rest begins. */
  resting?: (ms: number) => void;
}

/** Resolves at once within a slice; at a slice's end, after the rest that follows it. */
export type Pace = () => Promise<void>;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

export function dutyCycle(o: PaceOptions): Pace {
  const now = o.now ?? (() => performance.now());
  const rest = o.rest ?? sleep;
  let start: number | undefined;
  return async () => {
    const t = now();
    start ??= t;
    const worked = t - start;
    if (worked < o.sliceMs) return;
    o.resting?.(worked * o.restRatio);
    await rest(worked * o.restRatio);
    start = now();
  };
}

/** The server's pace: slices of 20 ms, each followed by a rest of 80 ms (closing takes at most a fifth of the time). */
export const SERVER_PACE: PaceOptions = { sliceMs: 20, restRatio: 4 };
