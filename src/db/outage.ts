// Riding out a short database outage (a restart, a failover) inside the server instead of
// answering 503, for the callers that pay dearly for a 5xx: the real worker stops for hours on
// one from update_result or register_node. The attempt is retried with backoff (p-retry) for
// as long as the database is unavailable, within a budget; anything else fails at once. Only
// for calls that are safe to repeat: each attempt either committed nothing or is answered
// idempotently the second time (a report replays).
import pRetry from 'p-retry';
import { isUnavailable } from './errors.js';

export const OUTAGE_BUDGET_MS = 5_000;
const RETRIES = 20;

export async function rideOutage<T>(attempt: () => Promise<T>, budgetMs = OUTAGE_BUDGET_MS): Promise<T> {
  // The first attempt runs bare: get_job and update_result come here on every call, and
  // p-retry builds its schedule of 20 randomised timeouts per call (0.08 ms of the server's CPU
  // per job in the dispatch bench's profile, docs/benchmarks.md). Only once the database has
  // failed does the backoff start, with the budget that is left.
  const started = Date.now();
  let failed: unknown;
  try {
    return await attempt();
  } catch (err) {
    if (!isUnavailable(err)) throw err;
    failed = err;
  }
  // p-retry's own first attempt is the failure already seen: it waits its first timeout before
  // running the attempt again, as it did when it ran the first one itself.
  return pRetry(
    () => {
      if (failed === undefined) return attempt();
      const err = failed;
      failed = undefined;
      // eslint-disable-next-line @typescript-eslint/only-throw-error -- the attempt's own error, rethrown as it came
      throw err;
    },
    {
      retries: RETRIES,
      minTimeout: 100,
      maxTimeout: 1_000,
      factor: 2,
      randomize: true,
      maxRetryTime: Math.max(0, budgetMs - (Date.now() - started)),
      shouldRetry: (err) => isUnavailable(err),
    },
  );
}
