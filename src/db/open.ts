// Opens the configured database: PostgreSQL when DATABASE_URL is set (directly or through a
// pooler: db/pg.ts), otherwise the embedded PGlite in DATA_DIR, guarded by the data-directory lock.
import { mkdirSync } from 'node:fs';
import type { Config } from '../config.js';
import type { Database } from './database.js';
import { lockDataDir } from './data-dir-lock.js';

// Each driver is imported only when chosen: `ins` on the embedded database loads no pg, and a
// server on PostgreSQL no WebAssembly PostgreSQL.

export interface OpenOptions {
  /** Hears what the operator should know about the connection (a pooler found, LISTEN without a direct connection). */
  onWarning?: (message: string) => void;
  /** A command that ends in a moment: the embedded database sets up less memory (db/pglite.ts). */
  brief?: boolean;
}

export async function openDatabase(config: Config, purpose: string, { onWarning, brief = false }: OpenOptions = {}): Promise<Database> {
  if (config.databaseUrl) {
    const { openPostgres } = await import('./pg.js');
    return openPostgres({
      connectionString: config.databaseUrl, directConnectionString: config.databaseDirectUrl, pooler: config.databasePooler, max: config.dbPoolMax,
      ...(onWarning ? { onWarning } : {}),
    });
  }
  // PGlite creates its files world-readable; the directory keeps them to the owner.
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  const release = lockDataDir(config.dataDir, purpose);
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
