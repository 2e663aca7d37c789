// Why `ins serve` could not start, in one sentence an operator can act on, for the failures that
// are the environment's (the database out of reach or not migrated, DATA_DIR unusable, HOST not
// this machine's, LEDGER_KEY_FILE not a key)
// rather than a bug: these are logged without a stack trace, which would only hide the reason.
// Anything else keeps its stack (main.ts).
import type { Config } from '../config.js';
import { NotMigratedError } from '../db/migrate.js';
import { LedgerKeyError } from '../ledger/keys.js';

interface Failure {
  code?: string;
  syscall?: string;
  hostname?: string;
}

const NETWORK = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNRESET']);
const FILES = new Set(['EACCES', 'EPERM', 'EEXIST', 'ENOTDIR', 'EROFS', 'ENOSPC', 'ELOOP']);
/** PostgreSQL's own refusals at connection: no such database, authentication, no such role. */
const POSTGRES = new Set(['3D000', '28P01', '28000', '57P03']);

/** The sentence for an environmental failure to start; undefined for anything else. */
export function startFailure(err: unknown, config: Pick<Config, 'host' | 'port' | 'databaseUrl' | 'dataDir'>): string | undefined {
  if (!(err instanceof Error)) return undefined;
  // Their messages name the setting and what to do (LEDGER_KEY_FILE, ins migrate).
  if (err instanceof LedgerKeyError || err instanceof NotMigratedError) return err.message;
  const e = err as Error & Failure;
  const code = e.code ?? '';
  if (code === 'EADDRNOTAVAIL' || ((code === 'ENOTFOUND' || code === 'EAI_AGAIN') && e.hostname === config.host)) {
    return `HOST=${config.host} is not an address of this machine (${e.message}): set HOST to one of its addresses, or 0.0.0.0 for all`;
  }
  if (code === 'EACCES' && e.syscall === 'listen')
    return `port ${config.port} needs privileges this process does not have (${e.message}): set PORT above 1023`;
  // A wrong or missing password: PostgreSQL's 28P01 below; through PgBouncer's SCRAM, "SASL
  // authentication failed" (08P01), or the pg client's own refusal to start SCRAM without one.
  if (config.databaseUrl && /SASL|password/i.test(e.message) && (code === '08P01' || code === '28P01' || code === '')) {
    return `cannot log in to the PostgreSQL database of DATABASE_URL (${e.message}): check the user name and password in DATABASE_URL`;
  }
  if (config.databaseUrl && (NETWORK.has(code) || POSTGRES.has(code))) {
    return `cannot use the PostgreSQL database of DATABASE_URL (${e.message}): check that the server runs, the database exists and the role may connect`;
  }
  // ENOENT from mkdir: a parent that cannot hold directories (/proc, /sys: db/open.ts makeDirectory).
  if (!config.databaseUrl && (FILES.has(code) || (code === 'ENOENT' && e.syscall === 'mkdir'))) {
    return `cannot use DATA_DIR=${config.dataDir} for the embedded database (${e.message}): it must be a directory this user can write, or a path where one can be made`;
  }
  return undefined;
}
