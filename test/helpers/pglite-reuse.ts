// In-memory PGlite databases for tests, reused within a test process. Loading one costs about
// half a second of CPU (its WebAssembly PostgreSQL started and the template loaded), and the
// suite opened several hundred; resetting one to the migrated state costs a few milliseconds.
//
// A closed database goes back to the process's idle list only when it can be made exactly as
// new: its schema (tables, columns, constraints, indexes, triggers, functions, views,
// sequences, schema_migrations) has the fingerprint it had when it was new — a test that
// altered it (to make statements fail, say) gets its database closed for real — and then its
// session is discarded (prepared statements, settings, LISTENs, advisory locks), every table
// emptied with its identities restarted, and the rows the migrations seed put back. The
// Database a test held stays closed: whatever still calls it gets "PGlite is closed", as from
// a database closed for real.
import type { PGlite } from '@electric-sql/pglite';
import { sql, type Database, type Sql } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrate.js';
import { createPglite, wrapPglite } from '../../src/db/pglite.js';

const SCHEMAS = `n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')`;
const FINGERPRINT = sql(
  't_schema_fingerprint',
  `SELECT md5(string_agg(x, E'\\n' ORDER BY x)) AS f FROM (
    SELECT 'schema ' || n.nspname AS x FROM pg_namespace n WHERE ${SCHEMAS} AND n.nspname NOT LIKE 'pg_temp%' AND n.nspname NOT LIKE 'pg_toast_temp%'
    UNION ALL SELECT format('rel %s.%s %s %s %s', n.nspname, c.relname, c.relkind, c.relpersistence, coalesce(c.reloptions::text, ''))
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE ${SCHEMAS}
    UNION ALL SELECT format('col %s.%s %s %s %s %s', a.attrelid::regclass, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attgenerated,
        coalesce(pg_get_expr(d.adbin, d.adrelid), ''))
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE ${SCHEMAS} AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL SELECT format('con %s %s %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid))
      FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE ${SCHEMAS}
    UNION ALL SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
    UNION ALL SELECT format('trigger %s %s %s %s', t.tgrelid::regclass, t.tgname, t.tgenabled, pg_get_triggerdef(t.oid))
      FROM pg_trigger t WHERE NOT t.tgisinternal
    UNION ALL SELECT format('function %s %s', p.oid::regprocedure, md5(pg_get_functiondef(p.oid)))
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE ${SCHEMAS} AND p.prokind IN ('f', 'p')
    UNION ALL SELECT format('view %s %s', c.oid::regclass, md5(pg_get_viewdef(c.oid)))
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE ${SCHEMAS} AND c.relkind IN ('v', 'm')
    UNION ALL SELECT format('sequence %s.%s %s %s %s', schemaname, sequencename, start_value, increment_by, cycle)
      FROM pg_sequences WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
    UNION ALL SELECT 'migration ' || m::text FROM schema_migrations m
    UNION ALL SELECT 'database ' || datname FROM pg_database
    UNION ALL SELECT 'role ' || rolname FROM pg_roles
  ) fingerprint`,
);
const TABLES = sql(
  't_tables',
  `SELECT format('%I.%I', schemaname, tablename) AS name FROM pg_tables
  WHERE schemaname NOT IN ('pg_catalog', 'information_schema') AND tablename <> 'schema_migrations' ORDER BY 1`,
);
const SEQUENCES = sql(
  't_sequences',
  `SELECT format('%I.%I', schemaname, sequencename) AS name, start_value::text AS start FROM pg_sequences
  WHERE schemaname NOT IN ('pg_catalog', 'information_schema')`,
);

interface New {
  fingerprint: string;
  tables: string[];
  seeds: { table: string; rows: string }[];
  /** Which tables hold rows: one boolean column a table, named by its index in `tables`. */
  holdingRows: Sql;
  /** Every sequence back to its start, in one statement. */
  restartSequences: Sql | undefined;
}

/** What a new database holds, read from the first one this process opens. */
async function readNew(db: Database): Promise<New> {
  const [{ f }] = (await db.query<{ f: string }>(FINGERPRINT)) as [{ f: string }];
  const tables = (await db.query<{ name: string }>(TABLES)).map((t) => t.name);
  const seeds: New['seeds'] = [];
  for (const table of tables) {
    const [row] = await db.query<{ rows: string | null }>(sql('', `SELECT json_agg(t)::text AS rows FROM ${table} t`));
    if (row?.rows) seeds.push({ table, rows: row.rows });
  }
  const sequences = await db.query<{ name: string; start: string }>(SEQUENCES);
  return {
    fingerprint: f,
    tables,
    seeds,
    holdingRows: sql('', `SELECT ${tables.map((t, i) => `EXISTS (SELECT 1 FROM ${t}) AS "${i}"`).join(', ')}`),
    restartSequences:
      sequences.length === 0
        ? undefined
        : sql('', `SELECT ${sequences.map((q) => `setval('${q.name.replace(/'/g, "''")}'::regclass, ${BigInt(q.start)}, false)`).join(', ')}`),
  };
}

let asNew: New | undefined;
const idle: PGlite[] = [];
/** How many opens took an idle database (test/pglite-reuse.test.ts checks that they happen). */
export const reuses = { count: 0 };
/** How many databases wait for reuse in this process. */
export const idleCount = (): number => idle.length;

/** Back to the migrated state; false when it cannot be (the schema was changed). */
async function reset(pg: PGlite, n: New): Promise<boolean> {
  if (pg.closed) return false;
  const db = wrapPglite(pg, 'a test database being reset');
  try {
    // Outside any transaction: DISCARD ALL cannot run in one, and a test may have left one open.
    await pg.exec('ROLLBACK');
    await pg.exec('DISCARD ALL');
    const [{ f }] = (await db.query<{ f: string }>(FINGERPRINT)) as [{ f: string }];
    if (f !== n.fingerprint) return false;
    // Only the tables that hold rows: TRUNCATE costs about 1.5 ms a table whatever it holds
    // (new files for the table and its indexes), and a test writes to a few of them.
    const [holding] = await db.query<Record<string, boolean>>(n.holdingRows);
    const full = n.tables.filter((_, i) => holding?.[String(i)]);
    if (full.length > 0) await pg.exec(`TRUNCATE ${full.join(', ')} CASCADE`);
    for (const s of n.seeds) {
      await db.query(sql('', `INSERT INTO ${s.table} OVERRIDING SYSTEM VALUE SELECT * FROM json_populate_recordset(NULL::${s.table}, $1::json)`), [
        s.rows,
      ]);
    }
    // Every sequence, used or not: a rolled-back insert moves one on and leaves no row.
    if (n.restartSequences) await db.query(n.restartSequences);
    await pg.exec('DEALLOCATE ALL');
    return true;
  } catch {
    // Whatever it was left in, a new one will do.
    return false;
  }
}

/** A fresh, migrated in-memory database: a reused one when the process has one idle. */
export async function openReusedPglite(): Promise<Database> {
  const idleOne = idle.pop();
  if (idleOne) reuses.count++;
  const pg = idleOne ?? (await createPglite());
  const db = wrapPglite(pg, 'embedded PGlite in memory');
  await migrate(db);
  asNew ??= await readNew(db);
  let closed = false;
  // A subscription left running would still hear this PGlite's notifications after reuse.
  let listening = 0;
  const alive = <F extends (...args: never[]) => Promise<unknown>>(fn: F): F =>
    ((...args: Parameters<F>) => {
      if (closed) return Promise.reject(new Error('PGlite is closed'));
      return fn(...args);
    }) as F;
  return {
    ...db,
    query: alive(db.query),
    exec: alive(db.exec),
    transaction: alive(db.transaction),
    listen: alive(async (channel: string, onNotify: (payload: string) => void, onLive: (live: boolean) => void) => {
      const stop = await db.listen(channel, onNotify, onLive);
      listening++;
      let stopped = false;
      return async () => {
        if (!stopped) listening--;
        stopped = true;
        await stop();
      };
    }),
    close: async () => {
      if (closed) return;
      closed = true;
      if (listening === 0 && idle.length < 2 && (await reset(pg, asNew!))) idle.push(pg);
      else if (!pg.closed) await pg.close();
    },
  };
}
