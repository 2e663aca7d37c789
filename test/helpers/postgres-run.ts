// vitest's globalSetup (vitest.config.ts): the PostgreSQL databases this run's tests create are
// dropped without a test waiting for it. A DROP DATABASE waits for a checkpoint of the whole
// server (PostgreSQL 15's dropdb): 0.14 s on an idle machine, about 2 s beside two busy cores,
// some 85 times a run. Each test process drops the databases its tests closed one after another
// in the background (test/helpers/db.ts), and this teardown drops what is left at the run's end.
// Dropping them all only at the end took 60-110 s beside busy cores, where the background drops
// overlap the tests (docs/benchmarks.md). The databases carry the run's mark in their names, and
// the run holds a connection named after the mark until its end: a run that did not get to its
// end (killed) leaves its databases, which the next run drops at its start — those of marks no
// connection holds, so not another run's still going, from another checkout, container or host.
import pg from 'pg';

const URL_ = process.env.TEST_DATABASE_URL;
const MARKED = `SELECT datname FROM pg_database WHERE datname LIKE 'ins\\_test\\_r%'`;

function client(run?: string): pg.Client {
  return new pg.Client({ connectionString: URL_, ...(run ? { application_name: `ins_test_${run}` } : {}) });
}

/**
 * Drops the databases named, `atOnce` at a time (a few: their checkpoints are shared, and the
 * server's connection limit is not approached). Also test/helpers/db.ts's drop of one, and
 * bench/suite-cpu/drops.ts's measurement.
 */
export async function dropDatabases(names: string[], atOnce = 8): Promise<void> {
  const queue = [...names];
  await Promise.all(
    Array.from({ length: Math.min(atOnce, queue.length) }, async () => {
      const c = client();
      await c.connect();
      try {
        for (let n = queue.shift(); n; n = queue.shift()) await c.query(`DROP DATABASE IF EXISTS "${n}" WITH (FORCE)`);
      } finally {
        await c.end();
      }
    }),
  );
}

/** The marked databases of runs that hold no connection any more, or of `run`. */
async function leftBy(admin: pg.Client, run?: string): Promise<string[]> {
  const live = new Set(
    (
      await admin.query<{ name: string }>(`SELECT application_name AS name FROM pg_stat_activity WHERE application_name LIKE 'ins\\_test\\_r%'`)
    ).rows.map((r) => r.name),
  );
  return (await admin.query<{ datname: string }>(MARKED)).rows
    .map((r) => r.datname)
    .filter((name) => {
      const mark = /^ins_test_(r[0-9a-z]+)_/.exec(name)?.[1];
      return mark !== undefined && (run ? mark === run : !live.has(`ins_test_${mark}`));
    });
}

export default async function setup(): Promise<(() => Promise<void>) | undefined> {
  if (!URL_) return undefined;
  const run = `r${process.pid.toString(36)}x${Date.now().toString(36)}`;
  const holder = client(run);
  await holder.connect();
  try {
    await dropDatabases(await leftBy(holder));
  } catch (err) {
    console.warn(`could not drop the databases earlier runs left: ${String(err)}`);
  }
  process.env.INS_TEST_PG_RUN = run;
  return async () => {
    try {
      await dropDatabases(await leftBy(holder, run));
    } catch (err) {
      // The next run drops them (they are no longer held).
      console.warn(`could not drop this run's databases: ${String(err)}`);
    } finally {
      await holder.end().catch(() => undefined);
    }
  };
}
