// Writes the embedded database's template (src/db/pglite-template.ts) into dist/: the cluster
// PGlite's initdb makes with every migration applied, packed by PGlite itself, so that a new
// DATA_DIR opens without initdb and without running the migrations. Templates of another PGlite
// or other migrations are removed.
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { migrate } from '../src/db/migrate.js';
import { PGLITE_OPTIONS, wrapPglite } from '../src/db/pglite.js';
import { TEMPLATE_PATTERN, templatePath } from '../src/db/pglite-template.js';

const file = templatePath();
const dir = path.dirname(file);
mkdirSync(dir, { recursive: true });
for (const old of readdirSync(dir)) if (TEMPLATE_PATTERN.test(old) && old !== path.basename(file)) rmSync(path.join(dir, old));
const pg = await PGlite.create(PGLITE_OPTIONS);
await migrate(wrapPglite(pg, 'the template'));
// The service uses the database `postgres` alone and never creates another (src/db/pglite.ts), so
// initdb's template databases go: 600 of the cluster's 1,134 files and 14 MB, which every new
// DATA_DIR unpacked and every database in memory loaded (docs/benchmarks.md).
for (const name of ['template0', 'template1']) {
  await pg.exec(`ALTER DATABASE ${name} IS_TEMPLATE false`);
  await pg.exec(`DROP DATABASE ${name}`);
}
// Everything initdb and the migrations wrote is in the data files, not only in the WAL. Then
// the WAL moves to a new segment and a second checkpoint deletes the old one (wal_recycle off:
// not renamed for reuse, with its 9 MB of records): the template's one segment holds a
// checkpoint record and zeros, which unpack faster.
await pg.exec('CHECKPOINT');
await pg.exec('SET wal_recycle = off');
await pg.query('SELECT pg_switch_wal()');
await pg.exec('CHECKPOINT');
const tarball = await pg.dumpDataDir('gzip');
await pg.close();
writeFileSync(file, Buffer.from(await tarball.arrayBuffer()));
console.log(`built ${path.relative(process.cwd(), file)}`);
