// The tests' in-memory databases are reused within a process (test/helpers/pglite-reuse.ts):
// each must still come as new — empty but for the migrations' own rows, identities restarted —
// and a database whose schema a test changed must not come back at all.
import { describe, expect, it } from 'vitest';
import { sql, type Database } from '../src/db/database.js';
import { runCommand } from '../src/cli/commands.js';
import { bufferIo } from '../src/cli/io.js';
import { idleCount, openReusedPglite, reuses } from './helpers/pglite-reuse.js';

const q = async <T>(db: Database, text: string) => db.query<T>(sql('', text));
const state = async (db: Database) => ({
  nodes: await q(db, 'SELECT id::int, name FROM nodes ORDER BY id'),
  ledger: await q(db, 'SELECT * FROM ledger_state'),
  history: await q(db, 'SELECT * FROM points_history'),
  migrations: (await q<{ n: number }>(db, 'SELECT count(*)::int AS n FROM schema_migrations'))[0]!.n,
});

describe('in-memory test databases, reused', () => {
  it('comes back as new: rows gone, identities restarted, seeded rows in place, session reset', async () => {
    const first = await openReusedPglite();
    const fresh = await state(first);
    expect(fresh.migrations).toBeGreaterThan(0);
    expect(fresh.nodes).toEqual([]);
    for (const name of ['a', 'b']) expect(await runCommand(first, ['node', 'add', name], bufferIo())).toBe(0);
    await q(first, 'UPDATE points_history SET version = version + 1');
    await first.exec("SET statement_timeout = '1s'");
    expect((await state(first)).nodes).toEqual([
      { id: 1, name: 'a' },
      { id: 2, name: 'b' },
    ]);
    await first.close();
    // The old handle is closed, as a database closed for real.
    await expect(first.query(sql('', 'SELECT 1'))).rejects.toThrow('PGlite is closed');

    const before = reuses.count;
    const second = await openReusedPglite();
    expect(reuses.count).toBe(before + 1);
    expect(await state(second)).toEqual(fresh);
    expect((await q<{ t: string }>(second, "SELECT current_setting('statement_timeout') AS t"))[0]!.t).toBe('0');
    expect(await runCommand(second, ['node', 'add', 'c'], bufferIo())).toBe(0);
    expect((await state(second)).nodes).toEqual([{ id: 1, name: 'c' }]);
    await second.close();
  });

  it('does not come back once its schema was changed', async () => {
    const db = await openReusedPglite();
    // Other files' databases may be waiting in this process too (test files share it): this one must not join them.
    const idle = idleCount();
    await db.exec('ALTER TABLE nodes ADD COLUMN extra int');
    await db.close();
    expect(idleCount()).toBe(idle);
    const next = await openReusedPglite();
    expect(await q(next, "SELECT 1 FROM information_schema.columns WHERE table_name = 'nodes' AND column_name = 'extra'")).toEqual([]);
    await next.close();
  });
});
