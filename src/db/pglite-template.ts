// A new embedded database starts from a template rather than from initdb and the migrations.
// PGlite's initdb is most of what the first `ins` command or the first `ins serve` costs on a
// new DATA_DIR (seconds: a second WebAssembly module compiled and a whole cluster bootstrapped),
// and running every migration in WebAssembly PostgreSQL is most of the rest. The build makes the
// template (scripts/build-pgdata.ts) with the installed PGlite: an initdb'd cluster with every
// migration of migrations/ applied, the database `postgres` alone and its WAL in one segment.
// Its name carries PGlite's version and a digest of migrations/, so after an upgrade or an
// edited migration without a rebuild no template is found and initdb and the migrations run as
// before (a template is never older than migrations/).
//
// The template is unpacked here with the `tar` package, natively, before PGlite opens the
// directory as an existing cluster: PGlite's own loadDataDir writes the same files through its
// Emscripten filesystem, several times slower. PG_VERSION is put in place last, so a directory
// whose unpacking was interrupted holds no PG_VERSION: the next open unpacks it again.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { extract } from 'tar';
import { PACKAGE_ROOT } from '../paths.js';
import { loadMigrations } from './migrate.js';

function pgliteVersion(): string {
  // The package's main entry is dist/index.cjs; its package.json is one level above dist/.
  const main = createRequire(import.meta.url).resolve('@electric-sql/pglite');
  const pkg = JSON.parse(readFileSync(path.join(path.dirname(main), '..', 'package.json'), 'utf8')) as { version: string };
  return pkg.version;
}

/** A digest of the migrations the template holds: their names and texts. */
export function migrationsDigest(): string {
  const hash = createHash('sha256');
  for (const m of loadMigrations()) hash.update(`${m.name}\0${m.text}\0`);
  return hash.digest('hex').slice(0, 12);
}

let where: string | undefined;
/**
 * Where the build writes the template for the installed PGlite and the migrations as they are.
 * Worked out once per process (the package and migrations/ do not change under it): every
 * database opened in memory asks (templateBlob below).
 */
export function templatePath(): string {
  return (where ??= path.join(PACKAGE_ROOT, 'dist', `pgdata-pglite-${pgliteVersion()}-${migrationsDigest()}.tar.gz`));
}

/** Templates of other versions or migrations, which the build removes. */
export const TEMPLATE_PATTERN = /^pgdata-pglite-.*\.tar\.gz$/;

const VERSION_FILE = 'PG_VERSION';
const STAGING = '.template-unpacking';

/**
 * Unpacks the template (`file`: the build's, or another for a test) into a data directory that
 * holds no cluster yet; false when there is a cluster already, or no template for this PGlite
 * and these migrations (PGlite runs initdb). Throws when an entry could not be written.
 */
export function unpackTemplate(dataDir: string, file = templatePath()): boolean {
  if (existsSync(path.join(dataDir, VERSION_FILE))) return false;
  if (!existsSync(file)) return false;
  // Into a staging directory first (what an interrupted run left there goes), then each entry
  // moved into place, PG_VERSION last. Synchronous: about twice as fast as tar's streams here,
  // and nothing else runs while a command opens its database. PGlite's dump names its entries
  // from the cluster's root ("/base/1/…"): tar strips the leading slash and says so
  // (TAR_ENTRY_INFO), which we do not need. Anything else it reports is an entry it could not
  // write — outside strict mode tar only warns — and a cluster missing a file must not be put
  // in place: the command fails, and the next one unpacks again.
  const staging = path.join(dataDir, STAGING);
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging);
  let failed: string | undefined;
  extract({
    file,
    cwd: staging,
    sync: true,
    onwarn: (code, message) => {
      if (code !== 'TAR_ENTRY_INFO') failed ??= `${code}: ${String(message)}`;
    },
  });
  if (failed) throw new Error(`could not unpack the database template ${file} into ${dataDir}: ${failed}`);
  const entries = readdirSync(staging).sort((a, b) => Number(a === VERSION_FILE) - Number(b === VERSION_FILE));
  for (const entry of entries) {
    // What an interrupted run had moved already is replaced whole.
    rmSync(path.join(dataDir, entry), { recursive: true, force: true });
    renameSync(path.join(staging, entry), path.join(dataDir, entry));
  }
  rmSync(staging, { recursive: true, force: true });
  return existsSync(path.join(dataDir, VERSION_FILE));
}

let blob: { file: string; blob: Blob } | undefined;
/** The template as PGlite's loadDataDir takes it, for databases in memory; undefined when there is none. */
export function templateBlob(): Blob | undefined {
  const file = templatePath();
  if (blob?.file === file) return blob.blob;
  if (!existsSync(file)) return undefined;
  blob = { file, blob: new Blob([readFileSync(file)]) };
  return blob.blob;
}
