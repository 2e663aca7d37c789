// Embedded PostgreSQL (PGlite) stored in a data directory: a new user needs no database server.
// PGlite is one connection in this process, so its own mutex serialises transactions; the data
// directory is guarded by db/data-dir-lock.ts against a second process opening it.
//
// Durability: with the Node filesystem PGlite writes WAL through native file descriptors at
// COMMIT, so a committed result survives SIGKILL of the process (tested in
// test/restart.test.ts). PGlite runs with fsync off and its NodeFS sync is a no-op, so an OS
// crash or power loss can lose the last commits; use PostgreSQL (DATABASE_URL) where that
// matters. After each transaction we still call syncToFs() (PGlite issue #1065: transaction()
// skips it), which makes the guarantee hold for filesystems where it is not a no-op.
import { PGlite } from '@electric-sql/pglite';
import { StatementObservers, type Database, type Queryable, type Sql } from './database.js';

interface PgliteLike {
  query<R>(text: string, params?: unknown[]): Promise<{ rows: R[] }>;
  exec(text: string): Promise<unknown>;
}

function wrap(db: PgliteLike, observers: StatementObservers): Queryable {
  return {
    async query<R>(s: Sql, values: readonly unknown[] = []): Promise<R[]> {
      return (await observers.time(s.name, () => db.query<R>(s.text, values as unknown[]))).rows;
    },
    async exec(text: string): Promise<void> {
      await db.exec(text);
    },
  };
}

/** dataDir undefined → in memory (tests). */
export async function openPglite(dataDir?: string): Promise<Database> {
  const db = await PGlite.create(dataDir, {
    // int8 as JS numbers, as in db/pg.ts.
    parsers: { 20: (v: string) => Number(v) },
  });
  const observers = new StatementObservers();
  const base = wrap(db, observers);
  return {
    kind: 'pglite',
    description: dataDir ? `embedded PGlite at ${dataDir}` : 'embedded PGlite in memory',
    query: (s, values) => base.query(s, values),
    exec: (text) => base.exec(text),
    async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
      const out = await db.transaction((tx) => fn(wrap(tx, observers)));
      await db.syncToFs();
      return out;
    },
    async listen(channel, onNotify, onLive) {
      const unlisten = await db.listen(channel, (payload) => onNotify(payload));
      onLive(true);
      return async () => {
        onLive(false);
        // Closing the database already ended the subscription.
        await unlisten().catch(() => undefined);
      };
    },
    observeStatements: (fn) => observers.add(fn),
    poolStats: () => ({ total: 1, idle: 1, waiting: 0 }),
    close: () => db.close(),
  };
}
