// vitest globalSetup of `npm run test:pgbouncer` (vitest.pgbouncer.config.ts): one PgBouncer in
// transaction mode in front of TEST_DATABASE_URL's server for the whole run; the test helpers
// reach PostgreSQL through it (TEST_DATABASE_POOLER_URL, test/helpers/db.ts).
import { startPgBouncer, type PgBouncer } from './pgbouncer.js';

let bouncer: PgBouncer | undefined;

export async function setup(): Promise<void> {
  const url = process.env.TEST_DATABASE_URL;
  if (!url) throw new Error('npm run test:pgbouncer needs TEST_DATABASE_URL (the PostgreSQL server PgBouncer fronts)');
  bouncer = await startPgBouncer(url);
  // Forked test workers inherit this.
  process.env.TEST_DATABASE_POOLER_URL = bouncer.url('postgres');
}

export async function teardown(): Promise<void> {
  await bouncer?.stop();
}
