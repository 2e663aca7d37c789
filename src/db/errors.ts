// PostgreSQL error codes classified in one place: retryable (nothing was committed), the
// database unavailable right now, or a value the database cannot take. What a caller makes of
// them (HTTP 503 or 422, a CLI message) is the caller's business (http/errors.ts).

const RETRYABLE = new Set(['40001', '40P01']); // serialization_failure, deadlock_detected
const UNAVAILABLE_CLASSES = ['08', '53', '57']; // connection, resources, operator intervention (incl. 57014 timeout)
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EHOSTUNREACH']);

export const UNIQUE_VIOLATION = '23505';

export function pgCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

export function isRetryable(err: unknown): boolean {
  return RETRYABLE.has(pgCode(err) ?? '');
}

export function isUnavailable(err: unknown): boolean {
  const code = pgCode(err);
  if (code && (NETWORK_CODES.has(code) || UNAVAILABLE_CLASSES.includes(code.slice(0, 2)))) return true;
  const message = err instanceof Error ? err.message : '';
  // pg reports a lost or never-established connection with these messages and no code.
  return /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Connection ended|ended the connection|database system is (starting|shutting) up|PGlite is clos(ed|ing)/i.test(
    message,
  );
}

/** A data exception (class 22: a value the database cannot take) is the input's fault. */
export function isDataException(err: unknown): boolean {
  return pgCode(err)?.startsWith('22') ?? false;
}
