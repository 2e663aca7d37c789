// A connection lost in the middle of a transaction, between two of its statements (a backend
// terminated, a failover): pg-pool listens for no 'error' on a client it has lent, and an
// 'error' event nobody listens for ends the process. An outside probe's server, idle, died in
// 40 s of pg_terminate_backend every 0.2 s. src/db/pg.ts listens while the client is lent: the
// next statement fails instead, the client is dropped, and the database is used again.
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { openPostgres } from '../src/db/pg.js';
import { createPostgresDatabase, TEST_DATABASE_URL } from './helpers/db.js';

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

describe.skipIf(!TEST_DATABASE_URL)('a connection lost between two statements of a transaction', () => {
  it('fails the transaction or runs it again, and the process and the pool live on', async () => {
    const { url, drop } = await createPostgresDatabase();
    cleanups.push(drop);
    const db = openPostgres({ connectionString: url, max: 2 });
    const killer = new pg.Client({ connectionString: url });
    await killer.connect();
    cleanups.push(async () => {
      await db.close();
      await killer.end();
    });
    const count = async (pid: number) =>
      (await killer.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [pid])).rows[0]!.n;
    let attempts = 0;
    const outcome = await db
      .transaction(async (tx) => {
        attempts++;
        const [{ pid }] = (await tx.query<{ pid: number }>(sql('t_backend_pid', 'SELECT pg_backend_pid() AS pid'))) as [{ pid: number }];
        if (attempts === 1) {
          await killer.query('SELECT pg_terminate_backend($1)', [pid]);
          // Its backend gone, and a few round trips of another connection later, the end of this
          // one (the server's FATAL, then the socket's close) has reached the process: the client
          // is idle, between statements, when it hears it.
          await expect.poll(() => count(pid)).toBe(0);
          for (let i = 0; i < 3; i++) await killer.query('SELECT 1');
        }
        await tx.query(sql('t_after_loss', 'SELECT 1'));
        return 'committed';
      })
      .catch((err: Error) => `failed: ${err.message}`);
    expect(['committed', expect.stringMatching(/^failed: /)]).toContainEqual(outcome);
    expect(await db.query<{ one: number }>(sql('t_still_there', 'SELECT 1 AS one'))).toEqual([{ one: 1 }]);
  });
});
