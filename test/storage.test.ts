// Storage, on each backend: migrations, aggregates that always equal a recomputation from the
// job results (property test over random report sequences), and read plans that do not scan
// the results table.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type Database } from '../src/db/database.js';
import { loadMigrations, migrate } from '../src/db/migrate.js';
import { openPostgres } from '../src/db/pg.js';
import { LEASE } from '../src/jobs/sql/lease.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { uniqueNodes, UNIQUE_NODES } from '../src/repositories/unique-nodes.js';
import { RosterCache } from '../src/repositories/model-roster.js';
import { backends, createPostgresDatabase, TEST_DATABASE_URL } from './helpers/db.js';
import { RECOMPUTED, STORED } from './helpers/aggregates.js';
import { recordResult, rosterNames } from './helpers/production-paths.js';

const q = (db: Database, text: string, values: unknown[] = []) =>
  db.query<Record<string, unknown>>(sql(`t_${text.length}_${text.slice(0, 12)}`, text), values);

const BRUTE_UNIQUE = `SELECT n.name FROM job_results r JOIN nodes n ON n.id = r.node_id JOIN models m ON m.id = r.model_id
  WHERE m.name = $1 AND r.status = 'success' AND r.received_at BETWEEN $2::timestamptz AND $3::timestamptz GROUP BY n.name ORDER BY n.name COLLATE "C"`;

describe.each(backends)('storage on $name', (backend) => {
  let db: Database;
  beforeAll(async () => {
    db = await backend.open();
  });
  afterAll(async () => db.close());

  it('applies each migration once; a second run applies nothing', async () => {
    expect(await migrate(db)).toEqual([]);
    const rows = await q(db, 'SELECT version, name FROM schema_migrations ORDER BY version');
    expect(rows.map((r) => r.name)).toEqual(loadMigrations().map((m) => m.name));
  });

  // migrations/0022_cheaper_hash_checks.sql: the cheaper checks keep the rule (64 lowercase hex
  // digits, a hash and never a key), for every table that stores one.
  it('stores only 64 lowercase hex digits as a key or token hash', async () => {
    const good = 'ab'.repeat(32);
    const bad = [good.toUpperCase(), `${good}0`, good.slice(1), `${good.slice(2)}é`, `${good.slice(1)}g`, `nk_${good.slice(3)}`, ''];
    const node = await createNode(db, 'hash-check-node');
    const inserts: Array<[string, (hash: string) => Promise<unknown>]> = [
      ['api_keys', (h) => q(db, `INSERT INTO api_keys (label, key_hash, kind) VALUES ('hash-check', $1, 'user')`, [h])],
      ['nodes', (h) => q(db, `INSERT INTO nodes (name, key_hash) VALUES ('hash-check-' || md5($1), $1)`, [h])],
      ['node_sessions', (h) => q(db, `INSERT INTO node_sessions (token_hash, node_id, node_key_hash) VALUES ($1, $2, $3)`, [h, node.id, good])],
      [
        'job_leases',
        (h) =>
          q(
            db,
            `INSERT INTO job_leases (key_hash, job_id, attempt, node_id, session_id, expires_at) VALUES ($1, gen_random_uuid(), 1, $2, 0, now())`,
            [h, node.id],
          ),
      ],
    ];
    for (const [table, insert] of inserts) {
      for (const hash of bad) await expect(insert(hash), `${table} ${JSON.stringify(hash)}`).rejects.toThrow(/check constraint/);
      await expect(insert(good), table).resolves.toBeDefined();
    }
    // No check is left with the bounded repetition that cost 10 µs a row.
    expect(await q(db, `SELECT conname FROM pg_constraint WHERE pg_get_constraintdef(oid) LIKE '%{64}%'`)).toEqual([]);
  });

  // migrations/0023_announce_only_what_changed.sql: the function builds only the parts it has
  // input for; the items, their order and the empty announcement stay what 0007 defined.
  it('announces each part of a job statement in the defined order, and nothing for no change', async () => {
    const announce = async (...args: unknown[]) =>
      (await q(db, `SELECT jobs_announce('srv', $1::int[], $2::int[], $3::uuid[], $4::text[], $5::int[], $6::uuid[], $7::int[]) AS a`, args))[0]!.a;
    const [a, b] = ['00000000-0000-4000-8000-00000000000a', '00000000-0000-4000-8000-00000000000b'];
    expect(await announce([], [], [], [], [], [], [])).toBe('');
    expect(await announce(null, null, null, null, null, null, null)).toBe('');
    expect(await announce([7, 3, 7], [], [], [], [], [], [])).toBe('q:3:1,q:7:2');
    expect(await announce([], [], [b, a], ['done', 'canceled'], [2, 1], [], [])).toBe(`f:${b}:done:2,f:${a}:canceled:1`);
    expect(await announce([5], [5, 5], [a], ['failed'], [5], [b], [2])).toBe(`q:5:1,c:5:2,f:${a}:failed:5,e:${b}:2`);
  });

  // migrations/0024_usage_owed.sql: the statement that finishes jobs leaves what they owe their
  // owners' usage, one row per owner, day and model of that statement; nothing else does.
  it('leaves what finished jobs owe in usage_owed, once per job, from the statement that finished them', async () => {
    const [key] = await q(db, `INSERT INTO api_keys (label, key_hash, kind) VALUES ('owed', repeat('c', 64), 'user') RETURNING id`);
    const [model] = await q(db, `INSERT INTO models (name) VALUES ('owed-model') RETURNING id`);
    const submit = (owner: unknown, reserved: number) =>
      q(
        db,
        `INSERT INTO jobs (id, owner_key_id, model_id, state, request, deadline_at, usage_day, reserved_tokens)
      VALUES (gen_random_uuid(), $1::bigint, $2::int, 'leased', '{}', now() + interval '1 hour', DATE '2026-11-20', $3::bigint) RETURNING id::text`,
        [owner, model!.id, reserved],
      );
    const ids = [];
    for (const [owner, reserved] of [
      [key!.id, 100],
      [key!.id, 100],
      [key!.id, 50],
      [null, 100],
    ] as const)
      ids.push((await submit(owner, reserved))[0]!.id);
    const owed = () =>
      q(db, `SELECT key_id::int AS key, day::text, model_id AS model, tokens::int, jobs FROM usage_owed WHERE model_id = $1::int ORDER BY tokens`, [
        model!.id,
      ]);
    // A statement that moves jobs without finishing them owes nothing.
    await q(db, `UPDATE jobs SET state = 'queued' WHERE id = ANY($1::uuid[])`, [ids]);
    expect(await owed()).toEqual([]);
    // One statement finishes three of the owner's jobs (30 of 100 output tokens, no usage reported, failed) and the ownerless one.
    await q(
      db,
      `UPDATE jobs SET finished_at = now(), state = CASE WHEN id = $1::uuid THEN 'failed' ELSE 'done' END,
      usage = CASE WHEN id = $2::uuid THEN '{"completion_tokens": 30}'::jsonb END WHERE id = ANY($3::uuid[])`,
      [ids[2], ids[0], ids],
    );
    expect(await owed()).toEqual([{ key: Number(key!.id), day: '2026-11-20', model: model!.id, tokens: -70 - 0 - 50, jobs: 3 }]);
    // A finished job's later update (here its suspicion) owes nothing again.
    await q(db, `UPDATE jobs SET suspicion = '{}'::jsonb WHERE id = ANY($1::uuid[])`, [ids]);
    expect(await owed()).toHaveLength(1);
    // A statement whose two writing CTEs finish jobs (as the sweep's do): one row for both.
    const more = [(await submit(key!.id, 20))[0]!.id, (await submit(key!.id, 30))[0]!.id];
    await q(
      db,
      `WITH a AS (UPDATE jobs SET state = 'expired', finished_at = now() WHERE id = $1::uuid RETURNING 1),
      b AS (UPDATE jobs SET state = 'failed', finished_at = now() WHERE id = $2::uuid RETURNING 1) SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b) AS n`,
      more,
    );
    expect((await owed()).map((r) => [r.tokens, r.jobs])).toEqual([
      [-120, 3],
      [-50, 2],
    ]);
    await q(db, 'DELETE FROM usage_owed WHERE model_id = $1::int', [model!.id]);
  });

  it('keeps the aggregates equal to a recomputation from job_results after random reports', async () => {
    const nodeIds: number[] = [];
    for (let i = 0; i < 4; i++) nodeIds.push((await createNode(db, `prop-node-${i}`)).id);
    const base = Date.parse('2024-06-01T00:00:00Z');
    const reportArb = fc.record({
      node: fc.integer({ min: 0, max: 3 }),
      job: fc.integer({ min: 0, max: 14 }),
      model: fc.constantFrom('m-a', 'm-b', 'm-c'),
      status: fc.constantFrom('success', 'error'),
      result: fc.constantFrom({ message: 'x' }, { message: 'y' }),
      // Within four days, often near midnight, at microsecond precision.
      at: fc.oneof(
        fc.integer({ min: 0, max: 4 * 86_400_000 }),
        fc.integer({ min: 0, max: 3 }).map((d) => (d + 1) * 86_400_000 - 1),
      ),
      micros: fc.integer({ min: 0, max: 999 }),
    });
    const windowArb = fc.tuple(fc.integer({ min: -86_400_000, max: 5 * 86_400_000 }), fc.integer({ min: 0, max: 3 * 86_400_000 }));
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(reportArb, { minLength: 1, maxLength: 30 }),
        fc.array(windowArb, { minLength: 3, maxLength: 3 }),
        async (reports, windows) => {
          run++;
          await q(db, 'TRUNCATE job_results, node_daily_points, model_node_days, model_nodes');
          for (const r of reports) {
            const iso = new Date(base + r.at).toISOString().replace('Z', `${String(r.micros).padStart(3, '0')}Z`);
            await recordResult(db, {
              nodeId: nodeIds[r.node]!,
              jobId: `run${run}-job${r.job}`,
              modelName: r.model,
              status: r.status as 'success' | 'error',
              result: r.result,
              defaultPoints: 1,
              receivedAt: iso,
            });
          }
          for (const k of ['daily', 'overall', 'perDay'] as const) {
            expect(await q(db, STORED[k])).toEqual(await q(db, RECOMPUTED[k]));
          }
          // The rosters are per run: TRUNCATE (a test device) is not something they watch for.
          const rosters = new RosterCache(db);
          for (const [offset, length] of windows) {
            const start = new Date(base + offset).toISOString().replace('.000Z', 'Z');
            const end = new Date(base + offset + length).toISOString().replace('.000Z', 'Z');
            for (const model of ['m-a', 'm-b']) {
              const expected = (await q(db, BRUTE_UNIQUE, [model, start, end])).map((r) => r.name);
              expect(await uniqueNodes(db, model, start, end)).toEqual(expected);
              expect(await rosterNames(rosters, model, start, end)).toEqual(expected);
            }
          }
        },
      ),
      { numRuns: 40, seed: 20261122 },
    );
  });

  describe('read plans at volume', () => {
    beforeAll(async () => {
      // 40 nodes × 3 models × 60 days × 4 results, then aggregates built from them.
      await q(db, 'TRUNCATE job_results, node_daily_points, model_node_days, model_nodes');
      await q(db, `INSERT INTO nodes (name, key_hash) SELECT 'vol-' || i, encode(sha256(('vol' || i)::bytea), 'hex') FROM generate_series(1, 40) i`);
      await q(db, `INSERT INTO models (name) VALUES ('vol-a'), ('vol-b'), ('vol-c') ON CONFLICT DO NOTHING`);
      await q(
        db,
        `INSERT INTO job_results (job_id, node_id, model_id, status, result, points, received_at)
        SELECT 'vol-' || n.id || '-' || m.id || '-' || d || '-' || k, n.id, m.id, 'success', '{}'::jsonb, 1,
               timestamptz '2024-01-01 00:00:00+00' + d * interval '1 day' + k * interval '5 hours'
        FROM nodes n, models m, generate_series(0, 59) d, generate_series(0, 3) k
        WHERE n.name LIKE 'vol-%' AND m.name LIKE 'vol-%'`,
      );
      await q(
        db,
        `INSERT INTO node_daily_points SELECT node_id, (received_at AT TIME ZONE 'UTC')::date, sum(points), count(*) FROM job_results GROUP BY 1, 2`,
      );
      await q(db, `INSERT INTO model_nodes SELECT model_id, node_id, min(received_at), max(received_at) FROM job_results GROUP BY 1, 2`);
      await q(
        db,
        `INSERT INTO model_node_days SELECT model_id, node_id, (received_at AT TIME ZONE 'UTC')::date, min(received_at), max(received_at) FROM job_results GROUP BY 1, 2, 3`,
      );
      await q(db, 'ANALYZE');
    });

    type Plan = { 'Node Type': string; 'Relation Name'?: string; Plans?: Plan[] };
    const scans = (p: Plan): Plan[] => [p, ...(p.Plans ?? []).flatMap(scans)];
    const explain = async (text: string, values: unknown[]): Promise<Plan[]> => {
      const [row] = await db.query<{ 'QUERY PLAN': unknown }>(sql(`explain_${text.length}`, `EXPLAIN (FORMAT JSON) ${text}`), values);
      const raw = row!['QUERY PLAN'];
      const json = (typeof raw === 'string' ? JSON.parse(raw) : raw) as [{ Plan: Plan }];
      return scans(json[0].Plan);
    };

    it('daily_points reads node_daily_points by index only, besides the node and the history version', async () => {
      const { text } = (await import('../src/repositories/points.js')).DAILY_POINTS_SQL;
      const plan = await explain(text, [['vol-1', 'vol-2'], [30, 7], '2024-02-15']);
      const relations = plan.map((p) => p['Relation Name']).filter(Boolean);
      expect(relations.filter((r) => r !== 'nodes' && r !== 'points_history')).toEqual(['node_daily_points']);
      const seq = plan.filter((p) => p['Node Type'] === 'Seq Scan').map((p) => p['Relation Name']);
      expect(seq).not.toContain('node_daily_points');
    });

    it('unique_nodes never scans job_results or model_node_days sequentially', async () => {
      for (const [s, e] of [
        ['2024-01-10T00:00:00Z', '2024-02-10T00:00:00Z'],
        ['2024-01-20T03:00:00Z', '2024-01-20T04:00:00Z'],
        ['-infinity', 'infinity'],
      ]) {
        const plan = await explain(UNIQUE_NODES.text, ['vol-a', s, e]);
        const seq = plan.filter((p) => p['Node Type'] === 'Seq Scan').map((p) => p['Relation Name']);
        expect(seq).not.toContain('job_results');
        expect(seq).not.toContain('model_node_days');
      }
    });

    it('answers the volume windows like the brute-force scan', async () => {
      for (const [s, e] of [
        ['2024-01-10T00:00:00Z', '2024-02-10T00:00:00Z'],
        ['2024-01-20T03:00:00Z', '2024-01-20T04:00:00Z'],
        ['2024-01-20T05:00:00Z', '2024-01-20T05:00:00Z'],
      ]) {
        const expected = (await q(db, BRUTE_UNIQUE, ['vol-a', s, e])).map((r) => r.name);
        expect(await uniqueNodes(db, 'vol-a', s!, e!)).toEqual(expected);
      }
    });
  });
});

describe.runIf(TEST_DATABASE_URL)('migrations on PostgreSQL with instances starting at once', () => {
  it('applies each migration exactly once', async () => {
    const { url, drop } = await createPostgresDatabase();
    const dbs = Array.from({ length: 4 }, () => openPostgres({ connectionString: url, max: 2 }));
    try {
      const applied = await Promise.all(dbs.map((d) => migrate(d)));
      expect(applied.flat().sort()).toEqual(
        loadMigrations()
          .map((m) => m.name)
          .sort(),
      );
    } finally {
      await Promise.all(dbs.map((d) => d.close()));
      await drop();
    }
  });
});

describe.runIf(TEST_DATABASE_URL)('0024_usage_owed on a database with jobs still owed', () => {
  it('carries what the finished, unsettled jobs owe into usage_owed, and nothing of the settled ones', async () => {
    const { url, drop } = await createPostgresDatabase();
    const db = openPostgres({ connectionString: url, max: 1 });
    try {
      const all = loadMigrations();
      await migrate(
        db,
        all.filter((m) => m.version < 24),
      );
      await q(db, `INSERT INTO api_keys (label, key_hash, kind) VALUES ('owed', repeat('c', 64), 'user')`);
      await q(db, `INSERT INTO models (name) VALUES ('owed-model')`);
      // Two owed (done with 30 of 100, canceled with 40 reserved), one settled (usage_day NULL), one open.
      await q(
        db,
        `INSERT INTO jobs (id, owner_key_id, model_id, state, request, deadline_at, usage_day, reserved_tokens, finished_at, usage)
        SELECT gen_random_uuid(), (SELECT id FROM api_keys), (SELECT id FROM models WHERE name = 'owed-model'), s, '{}', now(), d, r, f, u
        FROM (VALUES ('done', DATE '2026-11-20', 100, now(), '{"completion_tokens": 30}'::jsonb), ('canceled', DATE '2026-11-20', 40, now(), NULL),
          ('done', NULL, 100, now(), '{"completion_tokens": 1}'::jsonb), ('queued', DATE '2026-11-20', 100, NULL, NULL)) AS v(s, d, r, f, u)`,
      );
      await migrate(db, all);
      expect(await q(db, 'SELECT day::text, tokens::int, jobs FROM usage_owed')).toEqual([{ day: '2026-11-20', tokens: -110, jobs: 2 }]);
    } finally {
      await db.close();
      await drop();
    }
  });
});

describe.runIf(TEST_DATABASE_URL)('connections to PostgreSQL', () => {
  it('run without JIT, in and out of transactions, on every connection of the pool', async () => {
    const db = openPostgres({ connectionString: TEST_DATABASE_URL!, max: 3 });
    try {
      const show = sql('t_show_jit', 'SHOW jit');
      // Three at once: three connections.
      const outside = await Promise.all(
        [1, 2, 3].map(async () =>
          db.transaction(async (tx) => {
            const [row] = await tx.query<{ jit: string }>(show);
            await tx.query(sql('t_sleep', 'SELECT pg_sleep(0.05)'));
            return row!.jit;
          }),
        ),
      );
      expect(outside).toEqual(['off', 'off', 'off']);
      expect((await db.query<{ jit: string }>(show))[0]!.jit).toBe('off');
    } finally {
      await db.close();
    }
  });

  it("plan a statement marked plan: 'generic' once, on its own connection; every other statement as PostgreSQL chooses", async () => {
    const db = openPostgres({ connectionString: TEST_DATABASE_URL!, max: 3 });
    try {
      const mode = "SELECT current_setting('plan_cache_mode') AS mode, current_setting('jit') AS jit, pg_backend_pid() AS pid";
      const generic = sql('t_generic_mode', mode, { plan: 'generic' });
      const [g] = await db.query<{ mode: string; jit: string; pid: number }>(generic);
      expect(g).toMatchObject({ mode: 'force_generic_plan', jit: 'off' });
      expect((await db.query<{ mode: string }>(sql('t_auto_mode', mode)))[0]!.mode).toBe('auto');
      // In a transaction it runs on the transaction's connection, as any statement.
      expect((await db.transaction((tx) => tx.query<{ mode: string }>(generic)))[0]!.mode).toBe('auto');
      // A statement with parameters runs from a generic plan from its first execution (left to
      // itself PostgreSQL plans the first five custom); jobs_lease is so marked.
      expect(await db.query(sql('t_generic_param', 'SELECT $1::int + 1 AS n', { plan: 'generic' }), [1])).toEqual([{ n: 2 }]);
      const plans = sql(
        't_generic_plans',
        `SELECT generic_plans::int, custom_plans::int, pg_backend_pid() AS pid FROM pg_prepared_statements
        WHERE name = 't_generic_param'`,
        { plan: 'generic' },
      );
      expect(await db.query(plans)).toEqual([{ generic_plans: 1, custom_plans: 0, pid: g!.pid }]);
      expect(LEASE.plan).toBe('generic');
    } finally {
      await db.close();
    }
  });
});
