// Riding out a short database outage (a restart, a failover) inside the server instead of
// answering 503, for the callers that pay dearly for a 5xx: the real worker stops for hours on
// one from update_result or register_node. The attempt is retried with backoff (p-retry) for
// as long as the database is unavailable, within a budget; anything else fails at once. Only
// for calls that are safe to repeat: each attempt either committed nothing or is answered
// idempotently the second time (a report replays).
import pRetry from 'p-retry';
import { isUnavailable } from './errors.js';

export const OUTAGE_BUDGET_MS = 5_000;

export function rideOutage<T>(attempt: () => Promise<T>, budgetMs = OUTAGE_BUDGET_MS): Promise<T> {
  return pRetry(attempt, {
    retries: 20,
    minTimeout: 100,
    maxTimeout: 1_000,
    factor: 2,
    randomize: true,
    maxRetryTime: budgetMs,
    shouldRetry: (err) => isUnavailable(err),
  });
}
