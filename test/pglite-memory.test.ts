// How much shared memory the embedded database sets up (src/db/pglite.ts): PostgreSQL's default
// for a server, less for a brief command (src/cli/brief.ts) and for a database in memory.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isBrief } from '../src/cli/brief.js';
import { loadConfig } from '../src/config.js';
import { sql, type Database } from '../src/db/database.js';
import { openDatabase } from '../src/db/open.js';
import { openPglite } from '../src/db/pglite.js';

const dir = mkdtempSync(path.join(tmpdir(), 'ins-memory-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function sharedBuffers(db: Database): Promise<string> {
  try {
    const [row] = await db.query<{ shared_buffers: string }>(sql('t_shared_buffers', 'SHOW shared_buffers'));
    return row!.shared_buffers;
  } finally {
    await db.close();
  }
}

describe("the embedded database's shared buffers", () => {
  it("are PostgreSQL's default for a server, 16 MB for a brief command, and the data is the same", async () => {
    const config = loadConfig({ DATA_DIR: path.join(dir, 'data') });
    const brief = await openDatabase(config, 'ins node add', { brief: true });
    await brief.query(sql('t_add_model', "INSERT INTO models (name, points_per_job) VALUES ('m', 2)"));
    expect(await sharedBuffers(brief)).toBe('16MB');
    const server = await openDatabase(config, 'server');
    const [model] = await server.query<{ points_per_job: number }>(
      sql('t_model', "SELECT points_per_job::float8 AS points_per_job FROM models WHERE name = 'm'"),
    );
    expect(model?.points_per_job).toBe(2);
    expect(await sharedBuffers(server)).toBe('128MB');
  }, 60_000);

  it('are 16 MB for a database in memory', async () => {
    expect(await sharedBuffers(await openPglite())).toBe('16MB');
  }, 60_000);

  it('brief are the commands people type and wait for, not the long ones', () => {
    for (const argv of [
      ['node', 'add', 'a'],
      ['key', 'add-user', 'x'],
      ['model', 'list'],
      ['job', 'list'],
    ])
      expect(isBrief(argv), argv.join(' ')).toBe(true);
    for (const argv of [['serve'], ['migrate'], ['import', 'results', 'f.csv'], ['ledger', 'export'], ['verify', 'calibrate'], ['worker'], []])
      expect(isBrief(argv), argv.join(' ')).toBe(false);
  });
});
