// Storage backends for tests: embedded PGlite (in memory) always, and real PostgreSQL when
// TEST_DATABASE_URL is set. Each open() gives a fresh, migrated database of its own. With
// TEST_DATABASE_POOLER_URL (a PgBouncer in transaction mode in front of that server, e.g. from
// `npm run test:pgbouncer`), PostgreSQL is reached through it instead, LISTEN directly, and
// PGlite is left out: that run is about the pooler.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Database, Sql } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrate.js';
import { openReusedPglite } from './pglite-reuse.js';
import { openPostgres } from '../../src/db/pg.js';
import { migrationsDigest } from '../../src/db/pglite-template.js';
import { dropDatabases } from './postgres-run.js';

export interface Backend {
  name: 'pglite' | 'postgres' | 'postgres through PgBouncer';
  open(): Promise<Database>;
}

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL;
export const TEST_DATABASE_POOLER_URL = process.env.TEST_DATABASE_POOLER_URL;
/** Set by test/helpers/postgres-run.ts (the suite's globalSetup): the run's databases are dropped without the tests waiting. */
const RUN = process.env.INS_TEST_PG_RUN;

/** A database of the test server, through the pooler when TEST_DATABASE_POOLER_URL is set. */
export function openTestPostgres(url: string, max: number): Database {
  if (!TEST_DATABASE_POOLER_URL) return openPostgres({ connectionString: url, max });
  const pooled = new URL(TEST_DATABASE_POOLER_URL);
  pooled.pathname = new URL(url).pathname;
  return openPostgres({ connectionString: pooled.toString(), directConnectionString: url, pooler: 'transaction', max });
}

/**
 * Creates a database on the test server (empty, or a copy of `template`); returns its URL and a
 * drop function. Its commits do not wait for the WAL's flush to disk (`synchronous_commit = off`
 * for the database, so for every connection to it: the tests' own, the servers' they start, a
 * pooler's): a commit is as visible to the next statement as before and survives a clean or fast
 * stop of PostgreSQL, and only a crash of PostgreSQL itself could lose the last ones, which no
 * test of the suite causes. The flush cost 1.7-2 ms a commit on these machines' disks
 * (docs/benchmarks.md). `durable` keeps the server's setting: the fault tests, which stop
 * PostgreSQL under load and count every report that got a 200, test the commit production runs.
 */
export async function createPostgresDatabase(template?: string, { durable = false } = {}): Promise<{ url: string; drop: () => Promise<void> }> {
  const base = new URL(TEST_DATABASE_URL!);
  const name = `ins_test_${RUN ? `${RUN}_` : ''}${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ''}`);
    if (!durable) await admin.query(`ALTER DATABASE ${name} SET synchronous_commit = off`);
  } finally {
    await admin.end();
  }
  const url = new URL(base);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      if (!RUN) return dropDatabases([name]);
      // Behind the tests, one at a time per test process; what a process leaves undropped
      // when it ends, the run's teardown drops (test/helpers/postgres-run.ts).
      dropping = dropping.then(() => dropDatabases([name])).catch(() => undefined);
    },
  };
}

/** The drops this test process has yet to make (see createPostgresDatabase). */
let dropping: Promise<void> = Promise.resolve();

// In memory, reused within the test process once reset to the migrated state (pglite-reuse.ts).
const pglite: Backend = { name: 'pglite', open: openReusedPglite };

// Each test's PostgreSQL database is copied from a migrated template database (CREATE DATABASE …
// TEMPLATE), made once for these migrations (its name carries their digest) by whichever test
// process needs it first: under a name of its own, then renamed into place, so that no process
// copies a template still being migrated. The migrations still run at each open (none is left
// to apply: a check that the copy is current).
let template: Promise<string> | undefined;
/** The migrated template database of these migrations. */
export const templateName = (): string => `ins_template_${migrationsDigest()}`;

async function migratedTemplate(): Promise<string> {
  const name = templateName();
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await admin.connect();
  try {
    if ((await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount) return name;
    const building = `${name}_${randomBytes(4).toString('hex')}`;
    await admin.query(`CREATE DATABASE ${building}`);
    const url = new URL(TEST_DATABASE_URL!);
    url.pathname = `/${building}`;
    const db = openPostgres({ connectionString: url.toString(), max: 1 });
    await migrate(db);
    await db.close();
    try {
      await admin.query(`ALTER DATABASE ${building} RENAME TO ${name}`);
    } catch {
      // Another process put its template in place first.
      await admin.query(`DROP DATABASE IF EXISTS ${building}`);
    }
    return name;
  } finally {
    await admin.end();
  }
}

const postgres: Backend = {
  name: TEST_DATABASE_POOLER_URL ? 'postgres through PgBouncer' : 'postgres',
  async open() {
    const { url, drop } = await createPostgresDatabase(await (template ??= migratedTemplate()));
    const db = openTestPostgres(url, 10);
    await migrate(db);
    const close = db.close.bind(db);
    return Object.assign(db, {
      close: async () => {
        await close();
        await drop();
      },
    });
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
