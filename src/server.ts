// The running service: opens the database, migrates, builds the app, listens, and knows how to
// stop (stop accepting, let in-flight requests finish within a bound, close the database).
import pino, { type Logger } from 'pino';
import type { Config } from './config.js';
import { buildApp } from './app.js';
import { openDatabase } from './db/open.js';
import { migrate, NotMigratedError, pendingMigrations } from './db/migrate.js';
import { countNodes } from './repositories/nodes.js';
import type { Database } from './db/database.js';
import type { Lifecycle } from './jobs/lifecycle.js';

type Destination = ReturnType<typeof pino.destination>;
const destinations = new WeakMap<Logger, Destination>();

export function createLogger(level: string): Logger {
  // Asynchronous writes: a synchronous write per request line is a syscall on the hot path.
  // pino flushes what is buffered when the process exits (and see flushLog).
  const destination = pino.destination({ sync: false });
  const logger = pino(
    {
      level,
      base: { service: 'ins' },
      // Belt and braces: nothing logs these, and if something ever did they would be hidden.
      redact: {
        paths: ['api_key', '*.api_key', 'headers.api_key', 'req.headers.api_key', 'req.headers.authorization', 'key', 'password'],
        censor: '[redacted]',
      },
    },
    destination,
  );
  destinations.set(logger, destination);
  return logger;
}

/**
 * Waits (at most `ms`) for the lines being written to the log to be written. Called before the
 * process exits, which flushes what is left synchronously — and sonic-boom 4's synchronous flush
 * retries a failed write for ever: with stdout a pipe whose reader has gone (`ins serve | head`,
 * a log shipper that died), a stopped server never exited (an outside probe). Written
 * asynchronously, a broken pipe shows as EPIPE, on which pino stops writing; the exit's flush then
 * has nothing to do. (pino's own `flush(cb)` answers at once, without waiting for a write under way.)
 */
export function flushLog(logger: Logger, ms = 1_000): Promise<void> {
  const destination = destinations.get(logger);
  // sonic-boom's count of bytes not yet written: it has no public one.
  if (!destination || !((destination as unknown as { _len?: number })._len! > 0)) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      destination.off('drain', done);
      destination.off('error', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    destination.once('drain', done);
    destination.once('error', done);
  });
}

export interface RunningServer {
  url: string;
  /** The open database, e.g. for the CLI's admin socket (closed by close()). */
  db: Database;
  /** The app's job lifecycle: operator commands run inside the server change jobs through it. */
  jobs: Lifecycle;
  close(): Promise<void>;
}

export interface StartOptions {
  /**
   * Runs once the database and the app are ready, before the port listens (so before /healthz
   * answers "ok"): the CLI opens its admin socket here, so that `ins` commands are forwarded
   * from the moment the server is seen up. What it returns is called first on close.
   */
  beforeListen?: (ready: { db: Database; jobs: Lifecycle }) => Promise<(() => Promise<void>) | undefined>;
  /** A stop signal that came while the start waits for an `ins` command to free the embedded database: the wait ends (StartAborted). */
  signal?: AbortSignal;
}

export async function startServer(config: Config, logger: Logger, opts: StartOptions = {}): Promise<RunningServer> {
  // An `ins` command run a moment before (the README's second terminal, a `docker exec` during a
  // restart) holds the embedded database for seconds: the start waits for it.
  const db = await openDatabase(config, 'server', {
    onWarning: (message) => logger.warn(message),
    waitForCommandMs: 30_000,
    ...(opts.signal ? { signal: opts.signal } : {}),
  });
  let closeBeforeListen: (() => Promise<void>) | undefined;
  try {
    if (config.migrateOnStart) {
      const applied = await migrate(db);
      if (applied.length) logger.info({ applied }, 'applied migrations');
    } else {
      // Checked before anything reads a table: else each background task's first statement
      // fails on its own, with no word of why.
      const pending = await pendingMigrations(db);
      if (pending.length) throw new NotMigratedError(pending);
    }
    const app = await buildApp({
      db,
      logger,
      bodyLimit: config.bodyLimit,
      defaultPointsPerJob: config.defaultPointsPerJob,
      processMetrics: true,
      requestTimeoutMs: config.requestTimeoutMs,
      headersTimeoutMs: config.headersTimeoutMs,
      keepAliveTimeoutMs: config.keepAliveTimeoutMs,
      rateLimits: config.rateLimits,
      trustProxy: config.trustProxy,
      corsOrigins: config.corsOrigins,
      coordinator: config.coordinator,
      verify: config.verify,
      ...(config.dispatch ? { dispatch: config.dispatch } : {}),
      ledger: { keyFile: config.ledgerKeyFile, closeEvery: 3600 },
      retention: { window: config.jobRetention, every: config.retentionEvery ?? 60 },
      settleEvery: 1,
    });
    const jobs = app.service.coordinator.lifecycle;
    try {
      // Ready (plugins loaded, background work started) before a forwarded command can reach it.
      await app.ready();
      closeBeforeListen = await opts.beforeListen?.({ db, jobs });
    } catch (err) {
      await app.close();
      throw err;
    }
    let url: string;
    try {
      url = await app.listen({ port: config.port, host: config.host });
    } catch (err) {
      await closeBeforeListen?.();
      await app.close();
      throw err;
    }

    logger.info({ url, database: db.description }, `listening on ${url} (database: ${db.description})`);
    if ((await countNodes(db)) === 0) {
      logger.info(
        'no nodes yet: create one and its key with `ins node add NAME` (works while the server runs; `npx ins` in a checkout, `docker exec CONTAINER ins` in the image)',
      );
    }

    let closing: Promise<void> | undefined;
    const close = (): Promise<void> =>
      (closing ??= (async () => {
        const timer = setTimeout(() => {
          logger.warn({ timeoutMs: config.shutdownTimeoutMs }, 'in-flight requests still running at the shutdown deadline; closing connections');
          app.server.closeAllConnections();
        }, config.shutdownTimeoutMs);
        try {
          await closeBeforeListen?.();
          await app.close();
        } finally {
          clearTimeout(timer);
          await db.close();
        }
      })());
    return { url, db, jobs, close };
  } catch (err) {
    await db.close();
    throw err;
  }
}
