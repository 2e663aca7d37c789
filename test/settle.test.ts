// The settler (src/usage/settle.ts) on each backend: it folds what finished jobs owe
// (usage_owed, migrations/0024_usage_owed.sql) into key_usage once, batch after batch, and it
// vacuums the rows it deleted itself (PGlite runs no autovacuum; a PostgreSQL may have it off).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type Database } from '../src/db/database.js';
import { Settler } from '../src/usage/settle.js';
import { backends } from './helpers/db.js';

const q = (db: Database, name: string, text: string, values: unknown[] = []) => db.query<Record<string, unknown>>(sql(name, text), values);

describe.each(backends)('the settler on $name', (backend) => {
  let db: Database;
  const errors: unknown[] = [];
  beforeAll(async () => {
    db = await backend.open();
  });
  afterAll(async () => db.close());

  it("folds each owed row once, in batches, into the key's total and the model's row", async () => {
    const [key] = await q(db, 't_s_key', `INSERT INTO api_keys (label, key_hash, kind) VALUES ('settle', repeat('d', 64), 'user') RETURNING id::int`);
    const [model] = await q(db, 't_s_model', `INSERT INTO models (name) VALUES ('settle-model') RETURNING id`);
    await q(
      db,
      't_s_reserve',
      `INSERT INTO key_usage (key_id, day, model_id, jobs, tokens) VALUES ($1::bigint, DATE '2026-11-20', 0, 7, 700), ($1::bigint, DATE '2026-11-20', $2::int, 7, 700)`,
      [key!.id, model!.id],
    );
    // Seven rows (one of them a job that used exactly its reservation), three per statement.
    await q(
      db,
      't_s_owed',
      `INSERT INTO usage_owed (key_id, day, model_id, tokens, jobs) SELECT $1::bigint, DATE '2026-11-20', $2::int, t, 1
      FROM unnest(ARRAY[-10, -20, -30, 0, -40, -50, -60]) AS t`,
      [key!.id, model!.id],
    );
    const settler = new Settler(db, { error: (err) => errors.push(err) }, 3, 0);
    expect(await settler.settle()).toEqual({ jobs: 7, busy: false });
    expect(await settler.settle()).toEqual({ jobs: 0, busy: false });
    const usage = await q(db, 't_s_usage', 'SELECT model_id, jobs, tokens::int FROM key_usage WHERE key_id = $1::bigint ORDER BY model_id', [
      key!.id,
    ]);
    expect(usage).toEqual([
      { model_id: 0, jobs: 7, tokens: 490 },
      { model_id: model!.id, jobs: 7, tokens: 490 },
    ]);
    expect(await q(db, 't_s_left', 'SELECT count(*)::int AS n FROM usage_owed')).toEqual([{ n: 0 }]);
    expect(errors).toEqual([]);
  });

  it('vacuums usage_owed after a look that settled something (PGlite has no autovacuum; a PostgreSQL may have it off)', async () => {
    const vacuums = async () =>
      Number((await q(db, 't_s_vacuums', `SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'usage_owed'`))[0]!.vacuum_count);
    const settler = new Settler(db, { error: (err) => errors.push(err) }, 1000, 0);
    const before = await vacuums();
    await settler.settle();
    expect(await vacuums()).toBe(before);
    await q(db, 't_s_owed1', `INSERT INTO usage_owed (key_id, day, model_id, tokens, jobs) VALUES (1, DATE '2026-11-20', 1, 0, 1)`);
    expect(await settler.settle()).toEqual({ jobs: 1, busy: false });
    expect(await vacuums()).toBe(before + 1);
    expect(errors).toEqual([]);
  });
});
