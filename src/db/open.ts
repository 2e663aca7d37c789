// Opens the configured database: PostgreSQL when DATABASE_URL is set, otherwise the embedded
// PGlite in DATA_DIR, guarded by the data-directory lock.
import { mkdirSync } from 'node:fs';
import type { Config } from '../config.js';
import type { Database } from './database.js';
import { lockDataDir } from './data-dir-lock.js';
import { openPostgres } from './pg.js';
import { openPglite } from './pglite.js';

export async function openDatabase(config: Config, purpose: string): Promise<Database> {
  if (config.databaseUrl) {
    return openPostgres({ connectionString: config.databaseUrl, max: config.dbPoolMax });
  }
  // PGlite creates its files world-readable; the directory keeps them to the owner.
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  const release = lockDataDir(config.dataDir, purpose);
  let db: Database;
  try {
    db = await openPglite(config.dataDir);
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
