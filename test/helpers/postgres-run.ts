// vitest's globalSetup (vitest.config.ts): the PostgreSQL databases this run's tests create are
// dropped without a test waiting for it. A DROP DATABASE waits for a checkpoint of the whole
// server (PostgreSQL 15's dropdb): 0.14 s on an idle machine, about 2 s beside two busy cores,
// some 85 times a run. Each test process drops the databases its tests closed one after another
// in the background (test/helpers/db.ts), and this teardown drops what is left at the run's end.
// Dropping them all only at the end took 60-110 s beside busy cores, where the background drops
// overlap the tests (docs/benchmarks.md). The databases carry the run's mark in their names; a
// run that did not get to its end (killed) leaves its own, which the next run drops at its start.
import pg from 'pg';

const URL_ = process.env.TEST_DATABASE_URL;

async function dropWhere(pattern: string): Promise<void> {
  const admin = new pg.Client({ connectionString: URL_ });
  await admin.connect();
  try {
    const queue = (await admin.query<{ datname: string }>('SELECT datname FROM pg_database WHERE datname LIKE $1', [pattern])).rows.map((r) => r.datname);
    // A few connections at a time: their checkpoints are shared, and the server's connection limit is not approached.
    await Promise.all(Array.from({ length: Math.min(8, queue.length) }, async () => {
      const c = new pg.Client({ connectionString: URL_ });
      await c.connect();
      try {
        for (let n = queue.shift(); n; n = queue.shift()) await c.query(`DROP DATABASE IF EXISTS "${n}" WITH (FORCE)`);
      } finally {
        await c.end();
      }
    }));
  } finally {
    await admin.end();
  }
}

export default async function setup(): Promise<(() => Promise<void>) | undefined> {
  if (!URL_) return undefined;
  const run = `r${process.pid}x${Date.now().toString(36)}`;
  // Another run's, left by a run that was killed: a run that is still going (another checkout's,
  // at the same moment) is told apart by its process still being there.
  const others = (await listRuns()).filter((r) => r.run !== run && !alive(r.pid));
  for (const r of others) await dropWhere(`ins\\_test\\_${r.run}\\_%`);
  process.env.INS_TEST_PG_RUN = run;
  return async () => { await dropWhere(`ins\\_test\\_${run}\\_%`); };
}

async function listRuns(): Promise<{ run: string; pid: number }[]> {
  const admin = new pg.Client({ connectionString: URL_ });
  await admin.connect();
  try {
    const rows = (await admin.query<{ datname: string }>(`SELECT datname FROM pg_database WHERE datname LIKE 'ins\\_test\\_r%'`)).rows;
    const runs = new Map<string, number>();
    for (const { datname } of rows) {
      const m = /^ins_test_(r(\d+)x[0-9a-z]+)_/.exec(datname);
      if (m) runs.set(m[1]!, Number(m[2]));
    }
    return [...runs].map(([run, pid]) => ({ run, pid }));
  } finally {
    await admin.end();
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
