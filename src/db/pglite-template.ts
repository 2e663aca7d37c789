// A new embedded database starts from a template rather than from initdb. PGlite's initdb is
// most of what the first `ins` command or the first `ins serve` costs on a new DATA_DIR
// (seconds: a second WebAssembly module compiled and a whole cluster bootstrapped), while
// unpacking the same cluster from a tarball takes a fraction of it. The build makes the
// template (scripts/build-pgdata.ts) with the installed PGlite: an initdb'd cluster, no schema
// (migrations still run, so a template older than migrations/ is harmless). Its name carries
// PGlite's version, so after an upgrade without a rebuild no template is found and initdb runs
// as before.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { PACKAGE_ROOT } from '../paths.js';

function pgliteVersion(): string {
  // The package's main entry is dist/index.cjs; its package.json is one level above dist/.
  const main = createRequire(import.meta.url).resolve('@electric-sql/pglite');
  const pkg = JSON.parse(readFileSync(path.join(path.dirname(main), '..', 'package.json'), 'utf8')) as { version: string };
  return pkg.version;
}

/** Where the build writes the template for the installed PGlite. */
export function templatePath(): string {
  return path.join(PACKAGE_ROOT, 'dist', `pgdata-pglite-${pgliteVersion()}.tar.gz`);
}

/** The template for a data directory that holds no cluster yet; undefined: let PGlite run initdb. */
export function templateFor(dataDir: string): Blob | undefined {
  if (existsSync(path.join(dataDir, 'PG_VERSION'))) return undefined;
  const file = templatePath();
  return existsSync(file) ? new Blob([readFileSync(file)]) : undefined;
}
