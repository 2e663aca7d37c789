// Writes the embedded database's template (src/db/pglite-template.ts) into dist/: the cluster
// PGlite's initdb makes, packed by PGlite itself, so that a new DATA_DIR opens without initdb.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { templatePath } from '../src/db/pglite-template.js';

const file = templatePath();
mkdirSync(path.dirname(file), { recursive: true });
const db = await PGlite.create();
// Everything initdb wrote is in the data files, not only in the WAL.
await db.exec('CHECKPOINT');
const tarball = await db.dumpDataDir('gzip');
await db.close();
writeFileSync(file, Buffer.from(await tarball.arrayBuffer()));
console.log(`built ${path.relative(process.cwd(), file)}`);
