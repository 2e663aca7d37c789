// Storage backends for tests: embedded PGlite (in memory) always, and real PostgreSQL when
// TEST_DATABASE_URL is set. Each open() gives a fresh, migrated database of its own. With
// TEST_DATABASE_POOLER_URL (a PgBouncer in transaction mode in front of that server, e.g. from
// `npm run test:pgbouncer`), PostgreSQL is reached through it instead, LISTEN directly, and
// PGlite is left out: that run is about the pooler.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Database, Sql } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrate.js';
import { openPglite } from '../../src/db/pglite.js';
import { openPostgres } from '../../src/db/pg.js';

export interface Backend {
  name: 'pglite' | 'postgres' | 'postgres through PgBouncer';
  open(): Promise<Database>;
}

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL;
export const TEST_DATABASE_POOLER_URL = process.env.TEST_DATABASE_POOLER_URL;

/** A database of the test server, through the pooler when TEST_DATABASE_POOLER_URL is set. */
export function openTestPostgres(url: string, max: number): Database {
  if (!TEST_DATABASE_POOLER_URL) return openPostgres({ connectionString: url, max });
  const pooled = new URL(TEST_DATABASE_POOLER_URL);
  pooled.pathname = new URL(url).pathname;
  return openPostgres({ connectionString: pooled.toString(), directConnectionString: url, pooler: 'transaction', max });
}

/** Creates an empty database on the test server; returns its URL and a drop function. */
export async function createPostgresDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const base = new URL(TEST_DATABASE_URL!);
  const name = `ins_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(base);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      const c = new pg.Client({ connectionString: TEST_DATABASE_URL });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

const pglite: Backend = {
  name: 'pglite',
  async open() {
    const db = await openPglite();
    await migrate(db);
    return db;
  },
};

const postgres: Backend = {
  name: TEST_DATABASE_POOLER_URL ? 'postgres through PgBouncer' : 'postgres',
  async open() {
    const { url, drop } = await createPostgresDatabase();
    const db = openTestPostgres(url, 10);
    await migrate(db);
    const close = db.close.bind(db);
    return Object.assign(db, { close: async () => { await close(); await drop(); } });
  },
};

export const backends: Backend[] = TEST_DATABASE_POOLER_URL ? [postgres] : TEST_DATABASE_URL ? [pglite, postgres] : [pglite];

/**
 * The same database, with `before` called ahead of each statement (awaited): to count or
 * record statements, or to let "another server" write just before one.
 */
export function beforeEachQuery(db: Database, before: (s: Sql, values: readonly unknown[]) => void | Promise<void>): Database {
  return Object.assign(Object.create(db) as Database, {
    query: async (s: Sql, values: readonly unknown[] = []) => {
      await before(s, values);
      return db.query(s, values);
    },
  });
}
