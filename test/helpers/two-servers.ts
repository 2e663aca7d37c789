// Two servers on one PostgreSQL database, as a deployment runs them: a fresh database, migrated
// once (as `ins migrate` does before the servers start), and two apps on it, each with its own
// pool. Called in a describe (which should run only with TEST_DATABASE_URL); all is closed and
// the database dropped after it.
import { afterAll, beforeAll } from 'vitest';
import { buildApp, type AppOptions } from '../../src/app.js';
import type { Database } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrate.js';
import { createPostgresDatabase, openTestPostgres } from './db.js';

/** `pool`: each server's connections; `listen`: the apps listen, their URLs in `urls`. */
export function twoServers(o: { pool: number; app: Omit<AppOptions, 'db'>; listen?: boolean }) {
  let drop: (() => Promise<void>) | undefined;
  const dbs: Database[] = [];
  const apps: Awaited<ReturnType<typeof buildApp>>[] = [];
  const urls: string[] = [];
  beforeAll(async () => {
    const created = await createPostgresDatabase();
    drop = created.drop;
    for (let i = 0; i < 2; i++) {
      const db = openTestPostgres(created.url, o.pool);
      if (i === 0) await migrate(db);
      dbs.push(db);
      const app = await buildApp({ db, ...o.app });
      apps.push(app);
      if (o.listen) urls.push(await app.listen({ port: 0, host: '127.0.0.1' }));
    }
  });
  afterAll(async () => {
    for (const app of apps) await app.close();
    for (const db of dbs) await db.close();
    await drop?.();
  });
  return { dbs, apps, urls };
}
