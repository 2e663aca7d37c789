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
//
// Modes: PGlite's initdb writes its files with mode 0666 whatever the umask (Emscripten sets
// modes explicitly); the files PostgreSQL itself creates later are 0600. So at every open the
// data directory's contents lose group write and every permission of others — PostgreSQL's
// own rule for a data directory (0750/0640 at most) — which protects a DATA_DIR that already
// existed with a loose mode (a container's /data is often 0755).
import { EventEmitter } from 'node:events';
import { chmodSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
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

/** Bits no file or directory under the data directory keeps: group write, anything for others. */
const LOOSE = 0o027;

/** Tightens the modes of everything under `dir` (not `dir` itself: its owner chose it). */
function tightenModes(dir: string): void {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isSymbolicLink()) continue;
    const mode = statSync(p).mode & 0o7777;
    if (mode & LOOSE) chmodSync(p, mode & ~LOOSE);
    if (entry.isDirectory()) tightenModes(p);
  }
}

/** dataDir undefined → in memory (tests). */
export async function openPglite(dataDir?: string): Promise<Database> {
  const db = await PGlite.create(dataDir, {
    // int8 as JS numbers, as in db/pg.ts.
    parsers: { 20: (v: string) => Number(v) },
  });
  if (dataDir) tightenModes(dataDir);
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
    events: new EventEmitter(),
    observeStatements: (fn) => observers.add(fn),
    poolStats: () => ({ total: 1, idle: 1, waiting: 0 }),
    close: () => db.close(),
  };
}
