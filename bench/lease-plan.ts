// The lease-plan scenario (`npm run bench -- --scenario lease-plan`): how jobs_lease (src/jobs/
// sql/lease.ts) is planned with a deep backlog — --queued jobs spread over --models
// models and 10 owners (default 100,000 over 20) — under PostgreSQL's plan cache: a custom plan
// every execution (what PostgreSQL chose: 0 generic, 200 custom in pg_prepared_statements) and
// the generic plan (plan_cache_mode = force_generic_plan). For each: planning and execution time
// from EXPLAIN ANALYZE (medians of --rounds rounds, each rolled back so the backlog stays), the
// plan's shape, and the round trip of the named statement as the server sends it. PostgreSQL only.
import pg from 'pg';
import { LEASE } from '../src/jobs/sql/lease.js';
import { freshDatabase, ins, printRows } from './common.js';

export interface LeasePlanOptions {
  databaseUrl: string;
  backlog: number;
  models: number;
  rounds: number;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.floor(s.length / 2)]! * 1000) / 1000;
};

export async function leasePlanScenario(o: LeasePlanOptions): Promise<void> {
  const db = await freshDatabase('postgres', o.databaseUrl, `ins_bench_lease_plan_${process.pid}`);
  const c = new pg.Client({ connectionString: db.env.DATABASE_URL });
  try {
    await ins(['migrate'], db.env);
    await c.connect();
    await c.query('SET jit = off');
    await c.query(`INSERT INTO models (name) SELECT 'm' || g FROM generate_series(1, $1::int) g`, [o.models]);
    await c.query(`INSERT INTO nodes (name, key_hash) SELECT 'n' || g, encode(sha256(('n' || g)::bytea), 'hex') FROM generate_series(1, 64) g`);
    await c.query(
      `INSERT INTO node_sessions (node_id, token_hash, node_key_hash, capacity, models)
      SELECT g, encode(sha256(('s' || g)::bytea), 'hex'), encode(sha256(('n' || g)::bytea), 'hex'), 4, ARRAY(SELECT generate_series(1, $1::int)) FROM generate_series(1, 64) g`,
      [o.models],
    );
    // The backlog: 10 owners, each model's queue in fair order; and as many finished jobs beside it.
    await c.query(
      `INSERT INTO jobs (id, owner_key_id, model_id, state, request, deadline_at, fair_key, submitted_at)
      SELECT gen_random_uuid(), 1 + g % 10, 1 + g % $2::int, CASE WHEN g <= $1::int THEN 'queued' ELSE 'done' END, '{"messages":[]}', now() + interval '1 day',
        1e9 + g, now() - interval '1 hour'
      FROM generate_series(1, 2 * $1::int) g`,
      [o.backlog, o.models],
    );
    await c.query('VACUUM ANALYZE');
    // A dispatch round: 32 waiting polls of 32 sessions, in 4 groups of 5 models each.
    const groups = [0, 1, 2, 3];
    const asks = Array.from({ length: 32 }, (_, i) => ({
      g: i % 4,
      k: Math.floor(i / 4) + 1,
      session: i + 1,
      node: i + 1,
      key: (i + 1).toString(16).padStart(64, '0'),
      rank: 1,
    }));
    const values = [
      asks.map((a) => a.g),
      asks.map((a) => a.k),
      asks.map((a) => a.session),
      asks.map((a) => a.node),
      asks.map((a) => a.key),
      asks.map((a) => a.rank),
      groups,
      groups.map((g) => `{${[1, 2, 3, 4, 5].map((m) => 1 + ((g * 5 + m - 1) % o.models)).join(',')}}`),
      groups.map(() => 8),
      60,
    ];
    // The same values as SQL literals, for EXPLAIN … EXECUTE (array literals; strings quoted inside).
    const literal = (v: unknown) => (Array.isArray(v) ? `'{${v.map((x) => (typeof x === 'string' ? `"${x}"` : String(x))).join(',')}}'` : String(v));
    await c.query(`PREPARE lease AS ${LEASE.text}`);
    const rows: string[][] = [
      [
        'plan_cache_mode',
        'planning ms (median)',
        'execution ms (median)',
        'named statement round trip ms (median)',
        'jobs leased a round',
        'plans (generic / custom)',
      ],
    ];
    for (const mode of ['auto', 'force_custom_plan', 'force_generic_plan']) {
      await c.query(`SET plan_cache_mode = ${mode}`);
      await c.query('DEALLOCATE ALL');
      await c.query(`PREPARE lease AS ${LEASE.text}`);
      const planning: number[] = [];
      const execution: number[] = [];
      const trip: number[] = [];
      let leased = 0;
      let shape = '';
      for (let r = 0; r < o.rounds; r++) {
        await c.query('BEGIN');
        const [plan] = (
          await c.query<{ 'QUERY PLAN': [{ 'Planning Time': number; 'Execution Time': number; Plan: unknown }] }>(
            `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE lease(${values.map(literal).join(', ')})`,
          )
        ).rows[0]!['QUERY PLAN'];
        planning.push(plan['Planning Time']);
        execution.push(plan['Execution Time']);
        if (r === o.rounds - 1) shape = JSON.stringify(plan.Plan).includes('jobs_queued') ? 'jobs_queued index' : 'NO jobs_queued index';
        await c.query('ROLLBACK');
        await c.query('BEGIN');
        const t = performance.now();
        const res = await c.query({ name: `lease_${mode}`, text: LEASE.text, values });
        trip.push(performance.now() - t);
        leased = res.rows.filter((x: { row: string }) => x.row === 'leased').length;
        await c.query('ROLLBACK');
      }
      const [ps] = (
        await c.query<{ generic_plans: number; custom_plans: number }>(
          `SELECT generic_plans::int, custom_plans::int FROM pg_prepared_statements WHERE name = $1`,
          [`lease_${mode}`],
        )
      ).rows;
      rows.push([
        mode,
        String(median(planning)),
        String(median(execution)),
        String(median(trip)),
        String(leased),
        `${ps?.generic_plans} / ${ps?.custom_plans} (${shape})`,
      ]);
    }
    console.log(
      `\nlease-plan: ${o.backlog.toLocaleString('en')} queued jobs over ${o.models} models (and as many done), 32 asks in 4 groups of 5 models; ${o.rounds} rounds each`,
    );
    printRows(rows);
  } finally {
    await c.end().catch(() => {});
    await db.cleanup();
  }
}
