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
import { PGlite, parse, protocol } from '@electric-sql/pglite';
import { templateBlob, unpackTemplate } from './pglite-template.js';
import { StatementObservers, type Database, type Queryable, type Sql } from './database.js';

interface PgliteLike {
  exec(text: string): Promise<unknown>;
}

// Named statements, as pg prepares them on PostgreSQL (db/pg.ts): each Sql is parsed and
// analysed once, under its name, and PostgreSQL's plan cache decides when to keep a generic
// plan. PGlite's own query() sends an unnamed Parse every time, and in PGlite that work is this
// server's CPU: for the job statements (jobs/sql/) parsing, analysing and planning cost more
// than running them. The messages are the ones PGlite's query() sends (Parse, Describe,
// Bind, Describe, Execute, Sync), under PGlite's own locks: its transaction lock outside a
// transaction (as query() takes), its query lock always.
// Those locks and the readiness check are PGlite's _runExclusiveQuery, _runExclusiveTransaction
// and _checkReady: not documented, but declared in its types, so an upgrade that renames them
// fails the type check (npm run typecheck) rather than the server.
interface Prepared {
  text: string;
  types: number[];
}

class NamedStatements {
  private readonly prepared = new Map<string, Prepared>();

  constructor(private readonly pg: PGlite) {}

  /** Runs s; inTx: inside PGlite's transaction() (which holds the transaction lock). */
  async run<R>(s: Sql, values: readonly unknown[], inTx: boolean): Promise<R[]> {
    // As query() does: waits until ready, throws once closing or closed ("PGlite is closed").
    await this.pg._checkReady();
    const go = () => this.pg._runExclusiveQuery(() => this.runLocked<R>(s, values, inTx));
    return inTx ? go() : this.pg._runExclusiveTransaction(go);
  }

  private async runLocked<R>(s: Sql, values: readonly unknown[], inTx: boolean): Promise<R[]> {
    const send = async (m: Uint8Array) => (await this.pg.execProtocol(m, { syncToFs: false })).messages;
    const { serialize } = protocol;
    const messages = [];
    try {
      // The unnamed statement ('') is PGlite's own query()'s: parsed anew every time.
      let p = s.name === '' ? undefined : this.prepared.get(s.name);
      if (p && p.text !== s.text) {
        // Another text under a known name (names are meant to be unique): prepare it anew.
        this.prepared.delete(s.name);
        await send(serialize.close({ type: 'S', name: s.name }));
        p = undefined;
      }
      if (!p) {
        await send(serialize.parse({ name: s.name, text: s.text, types: [] }));
        // Kept from here on, so that a failure below closes it rather than leaving a name in use.
        p = { text: s.text, types: [] };
        if (s.name !== '') this.prepared.set(s.name, p);
        try {
          p.types = parse.parseDescribeStatementResults(await send(serialize.describe({ type: 'S', name: s.name })));
        } catch (err) {
          this.prepared.delete(s.name);
          await send(serialize.close({ type: 'S', name: s.name })).catch(() => undefined);
          throw err;
        }
      }
      const types = p.types;
      const params = values.map((v, i) => {
        if (v === null || v === undefined) return null;
        const type = types[i];
        const serializer = type === undefined ? undefined : this.pg.serializers[type];
        // As PGlite's query() does with a value of a type it has no serializer for.
        return serializer ? serializer(v) : (v as { toString(): string }).toString();
      });
      messages.push(...(await send(serialize.bind({ statement: s.name, values: params }))));
      messages.push(...(await send(serialize.describe({ type: 'P' }))));
      messages.push(...(await send(serialize.execute({}))));
    } finally {
      messages.push(...(await send(serialize.sync())));
    }
    if (!inTx) await this.pg.syncToFs();
    return (parse.parseResults(messages, this.pg.parsers)[0]?.rows ?? []) as R[];
  }
}

function wrap(db: PgliteLike, named: NamedStatements, inTx: boolean, observers: StatementObservers): Queryable {
  return {
    async query<R>(s: Sql, values: readonly unknown[] = []): Promise<R[]> {
      return observers.time(s.name, () => named.run<R>(s, values, inTx));
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

/** int8 as JS numbers, as in db/pg.ts. */
export const PGLITE_OPTIONS = { parsers: { 20: (v: string) => Number(v) } };

// PostgreSQL's shared buffers for a database that is opened for a moment, or held in memory.
// Setting up the default 128 MB is a third of what opening the database costs (WebAssembly code
// touching every page of it; 0.1–0.2 s of CPU, docs/benchmarks.md), which a command that reads a
// few rows and ends never gets back; and a database in memory has every page in memory already.
// A server keeps PostgreSQL's default. 16 MB holds the catalogues and a brief command's rows.
const BRIEF_SHARED_BUFFERS = '16MB';
const BRIEF_START_PARAMS = [...PGlite.defaultStartParams, '-c', `shared_buffers=${BRIEF_SHARED_BUFFERS}`];

export interface PgliteOpenOptions {
  /** Opened for a brief command (cli/brief.ts): smaller shared buffers. A database in memory always is. */
  brief?: boolean;
}

/** dataDir undefined → in memory (tests). */
export async function openPglite(dataDir?: string, options: PgliteOpenOptions = {}): Promise<Database> {
  return wrapPglite(await createPglite(dataDir, options), dataDir ? `embedded PGlite at ${dataDir}` : 'embedded PGlite in memory');
}

/** The PGlite itself, for openPglite and for tests that reuse one (test/helpers/db.ts). */
export async function createPglite(dataDir?: string, { brief = false }: PgliteOpenOptions = {}): Promise<PGlite> {
  // A new data directory is unpacked from the build's template, migrated already, rather than
  // made by initdb (db/pglite-template.ts); a database in memory is loaded from it (about a
  // fifth of initdb's time: most of what each test's fresh database cost).
  if (dataDir) unpackTemplate(dataDir);
  const template = dataDir ? undefined : templateBlob();
  const options = {
    ...PGLITE_OPTIONS,
    ...(template ? { loadDataDir: template } : {}),
    ...(brief || !dataDir ? { startParams: BRIEF_START_PARAMS } : {}),
  };
  const db = await PGlite.create(dataDir, options);
  if (dataDir) tightenModes(dataDir);
  return db;
}

/** A Database over a PGlite this module did not open (the build's template, scripts/build-pgdata.ts). */
export function wrapPglite(db: PGlite, description: string): Database {
  const observers = new StatementObservers();
  const named = new NamedStatements(db);
  const base = wrap(db, named, false, observers);
  return {
    kind: 'pglite',
    description,
    query: (s, values) => base.query(s, values),
    exec: (text) => base.exec(text),
    async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
      const out = await db.transaction((tx) => fn(wrap(tx, named, true, observers)));
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
