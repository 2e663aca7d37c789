// Forward-only SQL migrations from migrations/NNNN_name.sql, applied in order, each once, each
// in its own transaction that first takes an advisory lock, so instances starting at the same
// time apply each migration exactly once (the loser waits, then sees it recorded and skips).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { PACKAGE_ROOT } from '../paths.js';
import { sql, type Database } from './database.js';

export const MIGRATIONS_DIR = path.join(PACKAGE_ROOT, 'migrations');

// Any constant shared by all instances: "ins_mi" in ASCII (fits a JS number exactly).
const LOCK_KEY = 0x696e735f6d69;

const LOCK = sql('migrate_lock', `SELECT pg_advisory_xact_lock(${LOCK_KEY})`);
const CREATE_TABLE = `CREATE TABLE IF NOT EXISTS schema_migrations (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
)`;
const IS_APPLIED = sql('migrate_is_applied', 'SELECT 1 AS applied FROM schema_migrations WHERE version = $1::integer');
// One look before any lock: every command of `ins` migrates first, and on an up-to-date database
// (nearly always) that is one statement rather than a transaction per migration.
const APPLIED = sql('migrate_applied', `SELECT coalesce(array_agg(version), '{}'::integer[]) AS versions FROM schema_migrations`);
const HAS_TABLE = sql('migrate_has_table', `SELECT to_regclass('schema_migrations') IS NOT NULL AS present`);
const RECORD = sql('migrate_record', 'INSERT INTO schema_migrations (version, name) VALUES ($1::integer, $2::text)');

export interface Migration {
  version: number;
  name: string;
  text: string;
}

export function loadMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f))
    .sort()
    .map((f) => ({ version: Number(f.slice(0, 4)), name: f.replace(/\.sql$/, ''), text: readFileSync(path.join(dir, f), 'utf8') }));
}

/** The migrations this database has not had (all of them for an empty one), in order. */
export async function pendingMigrations(db: Database, migrations = loadMigrations()): Promise<Migration[]> {
  const [table] = await db.query<{ present: boolean }>(HAS_TABLE);
  if (!table?.present) return migrations;
  const [row] = await db.query<{ versions: number[] }>(APPLIED);
  const done = new Set(row?.versions ?? []);
  return migrations.filter((m) => !done.has(m.version));
}

/** How far behind the code a database is, for the messages that say so: "N migrations pending, the first NAME". */
export const pendingSummary = (pending: readonly Migration[]): string =>
  `${pending.length} migration${pending.length === 1 ? '' : 's'} pending, the first ${pending[0]!.name}`;

/** A server told not to migrate (MIGRATE_ON_START=false, --no-migrate) found the schema behind the code. */
export class NotMigratedError extends Error {
  constructor(pending: Migration[]) {
    super(
      `the database is not migrated (${pendingSummary(pending)}): run \`ins migrate\` with the same DATABASE_URL, or start the server without --no-migrate and with MIGRATE_ON_START unset (or true), so that it migrates`,
    );
  }
}

/** Applies pending migrations; returns the names of those this call applied. */
export async function migrate(db: Database, migrations = loadMigrations()): Promise<string[]> {
  if ((await pendingMigrations(db, migrations)).length === 0) return [];
  const applied: string[] = [];
  for (const m of migrations) {
    const did = await db.transaction(async (tx) => {
      await tx.query(LOCK);
      await tx.exec(CREATE_TABLE);
      if ((await tx.query(IS_APPLIED, [m.version])).length > 0) return false;
      await tx.exec(m.text);
      await tx.query(RECORD, [m.version, m.name]);
      return true;
    });
    if (did) applied.push(m.name);
  }
  return applied;
}
