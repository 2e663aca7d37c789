// Hot statements planned once on PostgreSQL (src/db/pg.ts, "Plans"): jobs_lease, marked
// `plan: 'generic'`, keeps one generic plan on its connection instead of a custom plan at every
// execution (issue 30: 0 generic, 200 custom), and still leases in fair order with a backlog;
// a statement without the mark keeps PostgreSQL's own choice. Real PostgreSQL only: PGlite has
// no plan cache to speak of, and through PgBouncer (unnamed statements) nothing is prepared.
import { afterEach, describe, expect, it } from 'vitest';
import { sql, type Database } from '../src/db/database.js';
import { LEASE, leaseJobs } from '../src/jobs/sql/lease.js';
import { migrate } from '../src/db/migrate.js';
import { openPostgres } from '../src/db/pg.js';
import { createPostgresDatabase, TEST_DATABASE_POOLER_URL, TEST_DATABASE_URL } from './helpers/db.js';

// What the connection that runs jobs_lease has prepared (pg_prepared_statements is per session).
const PLANS = sql('t_plans', 'SELECT name, generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements WHERE name = ANY($1::text[]) ORDER BY name', { plan: 'generic' });
const MODE = sql('t_mode', "SELECT current_setting('plan_cache_mode') AS mode");
const CUSTOM = sql('t_custom', 'SELECT count(*)::int AS n FROM jobs WHERE model_id = $1::int');

describe.runIf(TEST_DATABASE_URL && !TEST_DATABASE_POOLER_URL)('hot statements planned once on PostgreSQL', () => {
  let db: Database | undefined;
  let drop: (() => Promise<void>) | undefined;
  afterEach(async () => { await db?.close(); await drop?.(); });

  it('keeps one generic plan for jobs_lease, leasing in fair order from a backlog, and leaves other statements to PostgreSQL', async () => {
    const created = await createPostgresDatabase();
    drop = created.drop;
    db = openPostgres({ connectionString: created.url, pooler: 'none', max: 4 });
    await migrate(db);
    let n = 0;
    const q = (text: string) => db!.query(sql(`t_setup_${n++}`, text));
    await q("INSERT INTO models (name) VALUES ('m1'), ('m2')");
    await q("INSERT INTO nodes (name, key_hash) VALUES ('n1', repeat('a', 64))");
    await q("INSERT INTO node_sessions (node_id, token_hash, node_key_hash, capacity, models) VALUES (1, repeat('b', 64), repeat('a', 64), 64, '{1,2}')");
    // 200 queued jobs of two models, fair keys interleaved.
    await q(`INSERT INTO jobs (id, owner_key_id, model_id, state, request, deadline_at, fair_key)
      SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, 1, 1 + g % 2, 'queued', '{"messages":[]}', now() + interval '1 hour', g
      FROM generate_series(1, 200) g`);
    const leased: string[] = [];
    // Rounds one after another: the pool hands the same idle connection back each time.
    for (let round = 0; round < 12; round++) {
      const asks = [1, 2].map((k) => ({ group: 0, slot: k, sessionId: 1, nodeId: 1, keyHash: `${round}${k}`.padStart(64, 'c'), rank: k }));
      const r = await leaseJobs(db, asks, [{ group: 0, models: [1, 2], count: 2 }], 60);
      for (const row of r.rows) if ('jobId' in row) leased.push(row.jobId);
    }
    // Fair order, whichever the plan: fair_key 1, 2, … 24.
    expect(leased).toEqual(Array.from({ length: 24 }, (_, i) => `00000000-0000-0000-0000-${String(i + 1).padStart(12, '0')}`));
    expect(await db.query(PLANS, [[LEASE.name, PLANS.name]])).toEqual([{ name: LEASE.name, generic: 12, custom: 0 }, { name: PLANS.name, generic: 1, custom: 0 }]);
    // Everything else runs on connections that keep PostgreSQL's default.
    for (let i = 0; i < 8; i++) await db.query(CUSTOM, [1]);
    expect(await db.query(MODE)).toEqual([{ mode: 'auto' }]);
  });
});
