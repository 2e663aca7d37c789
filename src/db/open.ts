// Opens the configured database: PostgreSQL when DATABASE_URL is set (directly or through a
// pooler: db/pg.ts), otherwise the embedded PGlite in DATA_DIR, guarded by the data-directory lock.
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Config } from '../config.js';
import type { Database } from './database.js';
import { DataDirBusyError, lockDataDir, StartAborted } from './data-dir-lock.js';

// Each driver is imported only when chosen: `ins` on the embedded database loads no pg, and a
// server on PostgreSQL no WebAssembly PostgreSQL.

export interface OpenOptions {
  /** Hears what the operator should know about the connection (a pooler found, LISTEN without a direct connection). */
  onWarning?: (message: string) => void;
  /** A command that ends in a moment: the embedded database sets up less memory (db/pglite.ts). */
  brief?: boolean;
  /**
   * The server's open: an `ins` command holding the embedded database (it ends in moments) is
   * waited for, up to this long, rather than failing the start; another server is not.
   */
  waitForCommandMs?: number;
  /** Ends that wait at once (a stop signal): the open fails with StartAborted. */
  signal?: AbortSignal;
}

/** Takes the data directory's lock; waits for a command that holds it, up to `waitMs`. */
async function lockWaitingForCommands(
  dataDir: string,
  purpose: string,
  waitMs: number,
  onWarning?: (message: string) => void,
  signal?: AbortSignal,
): Promise<() => void> {
  const deadline = Date.now() + waitMs;
  let told = false;
  for (;;) {
    try {
      return lockDataDir(dataDir, purpose);
    } catch (err) {
      if (!(err instanceof DataDirBusyError) || err.purpose === 'server' || Date.now() >= deadline) throw err;
      if (signal?.aborted) throw new StartAborted(`stopped while waiting: ${err.message}`);
      if (!told) onWarning?.(`${err.message}: waiting for it to finish (at most ${Math.round(waitMs / 1000)} s)`);
      told = true;
      await sleep(100);
    }
  }
}

/**
 * mkdir -p, one directory at a time: Node's own recursive mkdirSync never returns for a path
 * under /proc (ENOENT there is not "a parent is missing"; it retries for ever, in the event loop,
 * deaf to SIGTERM). Here such a path fails with mkdir's own error.
 */
export function makeDirectory(dir: string, mode: number): void {
  const missing: string[] = [];
  for (let d = path.resolve(dir); !existsSync(d); d = path.dirname(d)) {
    missing.unshift(d);
    if (path.dirname(d) === d) break;
  }
  for (const d of missing) mkdirSync(d, { mode });
}

export async function openDatabase(
  config: Config,
  purpose: string,
  { onWarning, brief = false, waitForCommandMs = 0, signal }: OpenOptions = {},
): Promise<Database> {
  if (config.databaseUrl) {
    const { openPostgres } = await import('./pg.js');
    return openPostgres({
      connectionString: config.databaseUrl,
      directConnectionString: config.databaseDirectUrl,
      pooler: config.databasePooler,
      max: config.dbPoolMax,
      ...(onWarning ? { onWarning } : {}),
    });
  }
  // PGlite creates its files world-readable; the directory keeps them to the owner.
  makeDirectory(config.dataDir, 0o700);
  const release = await lockWaitingForCommands(config.dataDir, purpose, waitForCommandMs, onWarning, signal);
  let db: Database;
  try {
    const { openPglite } = await import('./pglite.js');
    db = await openPglite(config.dataDir, { brief });
  } catch (err) {
    release();
    throw err;
  }
  const close = db.close.bind(db);
  return Object.assign(db, {
    close: async () => {
      try {
        await close();
      } finally {
        release();
      }
    },
  });
}
