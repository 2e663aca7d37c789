// A new embedded data directory is unpacked from the build's template (src/db/pglite-template.ts):
// migrated already, tight modes, and recovered after an interrupted unpacking.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadMigrations, migrate } from '../src/db/migrate.js';
import { openPglite } from '../src/db/pglite.js';
import { templatePath, unpackTemplate } from '../src/db/pglite-template.js';
import { ROOT } from './helpers/process.js';

const dir = mkdtempSync(path.join(tmpdir(), 'ins-template-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the embedded database template', () => {
  beforeAll(() => {
    // `npm ci` builds it (the prepare script); a checkout whose migrations changed since needs a new one.
    if (!existsSync(templatePath())) execFileSync(process.execPath, ['--import', 'tsx', 'scripts/build-pgdata.ts'], { cwd: ROOT, stdio: 'ignore' });
  }, 120_000);

  it('holds every migration: a new data directory opens with none left to run', async () => {
    const data = path.join(dir, 'new');
    mkdirSync(data);
    expect(unpackTemplate(data)).toBe(true);
    expect(unpackTemplate(data)).toBe(false); // a cluster is there: never unpacked over
    const db = await openPglite(data);
    try {
      expect(await migrate(db)).toEqual([]);
      const rows = await db.query<{ version: number }>({ name: 't_versions', text: 'SELECT version FROM schema_migrations ORDER BY version' });
      expect(rows.map((r) => r.version)).toEqual(loadMigrations().map((m) => m.version));
      // The service's database alone (scripts/build-pgdata.ts drops initdb's templates), and the
      // WAL one segment of a checkpoint and zeros: what a new data directory unpacks is small.
      expect(await db.query({ name: 't_databases', text: 'SELECT datname FROM pg_database' })).toEqual([{ datname: 'postgres' }]);
    } finally {
      await db.close();
    }
    // Nothing readable by others, as after initdb (db/pglite.ts tightens the modes).
    expect(statSync(path.join(data, 'PG_VERSION')).mode & 0o027).toBe(0);
    expect(statSync(templatePath()).size).toBeLessThan(2_000_000);
  }, 120_000);

  it('refuses to put in place a cluster missing a file it could not write, and leaves no PG_VERSION', async () => {
    // A template whose `global/1213` cannot be written: `global` is a file in it. tar, outside
    // strict mode, only warns of such an entry; the unpacking used to take every warning for the
    // leading '/' it strips, and put the cluster in place without the file.
    const src = path.join(dir, 'broken-src');
    mkdirSync(src);
    writeFileSync(path.join(src, 'global'), 'a file where a directory should be');
    writeFileSync(path.join(src, 'PG_VERSION'), '17\n');
    const more = path.join(dir, 'broken-more');
    mkdirSync(path.join(more, 'global'), { recursive: true });
    writeFileSync(path.join(more, 'global', '1213'), 'x');
    // The file `global`, then global/1213 appended from another directory, gzipped.
    const file = path.join(dir, 'broken.tar.gz');
    execFileSync('tar', ['-cf', `${file}.tar`, '-C', src, 'global', 'PG_VERSION']);
    execFileSync('tar', ['-rf', `${file}.tar`, '-C', more, 'global/1213']);
    execFileSync('sh', ['-c', `gzip -c "${file}.tar" > "${file}"`]);
    const data = path.join(dir, 'broken');
    mkdirSync(data);
    expect(() => unpackTemplate(data, file)).toThrow(/could not unpack the database template .*global/);
    expect(existsSync(path.join(data, 'PG_VERSION'))).toBe(false);
  });

  it('starts again after an interrupted unpacking', async () => {
    const data = path.join(dir, 'interrupted');
    // What a killed unpacking leaves: part of the files, in staging or moved, and no PG_VERSION.
    mkdirSync(path.join(data, '.template-unpacking', 'base'), { recursive: true });
    writeFileSync(path.join(data, '.template-unpacking', 'base', 'junk'), 'x');
    mkdirSync(path.join(data, 'global'));
    writeFileSync(path.join(data, 'global', 'pg_control'), 'half');
    const db = await openPglite(data);
    try {
      expect(await migrate(db)).toEqual([]);
      expect(await db.query<{ one: number }>({ name: 't_one', text: 'SELECT 1 AS one' })).toEqual([{ one: 1 }]);
    } finally {
      await db.close();
    }
    expect(readdirSync(data)).not.toContain('.template-unpacking');
  }, 120_000);
});
