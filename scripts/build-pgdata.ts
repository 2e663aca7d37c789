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
// Everything initdb and the migrations wrote is in the data files, not only in the WAL.
await pg.exec('CHECKPOINT');
const tarball = await pg.dumpDataDir('gzip');
await pg.close();
writeFileSync(file, Buffer.from(await tarball.arrayBuffer()));
console.log(`built ${path.relative(process.cwd(), file)}`);
