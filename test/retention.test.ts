// Retention (src/retention/, docs/operations.md "Retention") through the real app: jobs run the
// way workers run them (the job-key path) and a seed-wire report with a node key; their history
// is then aged by three days (every time column, aggregates and caches alike, as if the days had
// passed) and retention runs with a window of one day. Its payloads go, points, rosters,
// counts and the ledger stay, and no replay of an old report is credited again. Retention waits
// for the ledger's closing, and one server prunes at a time. The public job counts are
// maintained, exact under concurrent writes, and not lowered by retention.
import { afterEach, describe, expect, it } from 'vitest';
import { sql, type Database } from '../src/db/database.js';
import { Retention } from '../src/retention/retention.js';
import { RETENTION_LOCK } from '../src/retention/sql.js';
import { checkDatabase } from '../src/ledger/check.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';

const MODEL = 'llama3.2:latest';
const DAY = 86_400;
const day = (ago: number): string => new Date(Date.now() - ago * DAY * 1000).toISOString().slice(0, 10);
/** What a prune that found nothing to delete answers. */
const NOTHING_PRUNED = { jobs: 0, leases: 0, results: 0, usage: 0, lanes: 0, sessions: 0, tokenChecks: 0, canaries: 0, busy: false };

/** Moves every time of the finished history `days` back, consistently: as if those days had passed. */
async function ageHistory(db: Database, days: number): Promise<void> {
  const i = `make_interval(days => ${days})`;
  const statements = [
    `UPDATE jobs SET submitted_at = submitted_at - ${i}, first_leased_at = first_leased_at - ${i}, deadline_at = deadline_at - ${i},
      finished_at = finished_at - ${i} WHERE finished_at IS NOT NULL`,
    `UPDATE job_leases SET leased_at = leased_at - ${i}, expires_at = expires_at - ${i}, ended_at = ended_at - ${i} WHERE ended_at IS NOT NULL`,
    `UPDATE job_results SET received_at = received_at - ${i}, created_at = created_at - ${i}`,
    `UPDATE node_daily_points SET day = day - ${days}`,
    `UPDATE model_nodes SET first_success_at = first_success_at - ${i}, last_success_at = last_success_at - ${i}`,
    `UPDATE model_node_days SET day = day - ${days}, first_success_at = first_success_at - ${i}, last_success_at = last_success_at - ${i}`,
    // The servers' caches of daily points and rosters read again.
    'UPDATE points_history SET version = version + 1',
    'UPDATE models SET roster_version = roster_version + 1',
  ];
  for (const [n, text] of statements.entries()) await db.query(sql(`t_age_${n}`, text));
}

describe.each(backends)('retention on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  const q = <T>(name: string, text: string, values: unknown[] = []) => t.db.query<T>(sql(name, text), values);
  const totals = async () =>
    (await t.app.inject({ url: '/total_job_count' })).json() as { total_job_count: number; by_state: Record<string, number> };
  const counted = async () => {
    const rows = await q<{ state: string; n: number }>('t_counted', 'SELECT state, count(*)::int AS n FROM jobs GROUP BY state');
    const byState: Record<string, number> = { queued: 0, leased: 0, done: 0, failed: 0, expired: 0, canceled: 0 };
    for (const r of rows) byState[r.state] = r.n;
    return { total_job_count: Object.values(byState).reduce((a, b) => a + b, 0), by_state: byState };
  };

  const cancel = (user: TestUser, id: string) => t.app.inject({ method: 'POST', url: `/cancel_job/${id}`, headers: { api_key: user.key } });
  const metricsText = async () => (await t.app.inject({ url: '/metrics' })).body;
  /** Every stored aggregate equals its recomputation from the rows. */
  const aggregatesExact = async () =>
    expect(await aggregatesAndRecomputation(t.db)).toSatisfy(({ stored, recomputed }) => JSON.stringify(stored) === JSON.stringify(recomputed));
  /** A Retention of its own on the app's database, with a window of `window` seconds, that throws what it meets. */
  const retention = (window: number) =>
    new Retention(
      t.db,
      { window },
      {
        pruned: () => {},
        error: (err) => {
          throw err;
        },
      },
    );

  /** A node that ran three jobs (job keys), one seed-wire report (node key); a canceled job and a queued one. */
  async function start() {
    t = await startApp(backend, { retention: { window: DAY, batch: 2 } });
    const nodeKey = await t.addNode('alpha');
    const user = new TestUser(t.app, await t.addUser());
    const worker = await new TestWorker(t.app, 'alpha', nodeKey).start([MODEL]);
    const jobs: Job[] = [];
    for (let i = 0; i < 3; i++) {
      await user.submit(MODEL, `prompt ${i}`);
      const job = (await worker.getJob())!;
      expect((await worker.report(job)).json()).toMatchObject({ points: 1, replayed: false });
      jobs.push(job);
    }
    const seed = {
      job_id: 'seed-1',
      api_key: nodeKey,
      model_name: MODEL,
      result: { message: 'hello', b: [1, 2], a: { z: 1, y: 'é' } },
      status: 'success',
    };
    expect((await worker.post('/worker/update_result', seed)).json()).toMatchObject({ points: 1, replayed: false });
    const canceled = await user.submit(MODEL, 'canceled');
    expect((await cancel(user, canceled)).statusCode).toBe(200);
    await ageHistory(t.db, 3);
    const open = await user.submit(MODEL, 'still queued');
    return { nodeKey, user, worker, jobs, seed, canceled, open };
  }

  const looks = async (nodeKey: string, token: string) => ({
    daily: (
      await t.app.inject({ method: 'POST', url: '/daily_points', headers: { api_key: nodeKey }, payload: { node_name: 'alpha', last_days: 5 } })
    ).json() as unknown,
    roster: (await t.app.inject({ url: `/unique_nodes?model_name=${encodeURIComponent(MODEL)}&start_date=2020-01-01` })).json() as unknown,
    points: (await t.app.inject({ url: '/get_points?node_name=alpha', headers: { authorization: `Bearer ${token}` } })).json() as unknown,
    totals: await totals(),
  });

  it('deletes finished payloads and lease history past the window, keeps points, rosters, counts and the ledger, and credits no replay again', async () => {
    const { nodeKey, user, worker, jobs, seed, canceled, open } = await start();
    // Before: the old job key's replay is a replay (its lease is still there).
    expect((await worker.report(jobs[0]!)).json()).toMatchObject({ replayed: true, points: 0 });
    const before = await looks(nodeKey, worker.token);
    expect(before.daily).toEqual([
      { date: day(4), points: 0 },
      { date: day(3), points: 4 },
      { date: day(2), points: 0 },
      { date: day(1), points: 0 },
      { date: day(0), points: 0 },
    ]);
    expect(before.roster).toMatchObject({ count: 1, nodes: ['alpha'] });
    expect(before.totals).toEqual({ total_job_count: 5, by_state: { queued: 1, leased: 0, done: 3, failed: 0, expired: 0, canceled: 1 } });
    await aggregatesExact();

    // Canary references (a job's request and answer each) go by the jobs' bound: one kept as old as the jobs, one today.
    for (const [job, days] of [
      [jobs[0]!, 3],
      [jobs[1]!, 0],
    ] as const) {
      await q(
        't_canary',
        `INSERT INTO canaries (job_id, model_id, request, answer, vouched, seen, at)
        SELECT $1::uuid, model_id, request, 'an answer', '{}', '{}', now() - make_interval(days => $2::int) FROM jobs WHERE id = $1::uuid`,
        [job.job_id, days],
      );
    }
    // The ledger has closed nothing yet: retention waits for it, whatever the rows' age.
    expect(await t.app.service.retention.prune()).toEqual(NOTHING_PRUNED);
    expect((await t.app.ledger.closer.closeDue())!.closed).toEqual([day(3), day(2)]);

    // A window longer than the history's age prunes nothing either.
    expect(await retention(4 * DAY).prune()).toEqual(NOTHING_PRUNED);

    // Past both: in batches of two, the finished jobs go with their leases; the bodies become hashes.
    // The embedded database has no autovacuum nor checkpointer: retention vacuums and checkpoints after deleting.
    const statements: string[] = [];
    const unobserve = t.db.observeStatements((name) => {
      statements.push(name);
    });
    expect(await t.app.service.retention.prune()).toEqual({
      jobs: 4,
      leases: 3,
      results: 4,
      usage: 0,
      lanes: 0,
      sessions: 0,
      tokenChecks: 0,
      canaries: 1,
      busy: false,
    });
    unobserve();
    expect(statements.filter((n) => n.startsWith('retention_'))).toEqual([
      'retention_prune_results',
      'retention_prune_results',
      'retention_prune_results',
      'retention_prune_jobs',
      'retention_prune_jobs',
      'retention_prune_jobs',
      'retention_prune_canaries',
      'retention_prune_usage',
      'retention_prune_lanes',
      'retention_prune_sessions',
      'retention_prune_token_checks',
      ...(backend.name === 'pglite' ? ['retention_vacuum', 'retention_checkpoint'] : []),
    ]);
    expect(await t.app.service.retention.prune()).toEqual(NOTHING_PRUNED);
    expect(await q('t_jobs_left', 'SELECT id::text, state FROM jobs')).toEqual([{ id: open, state: 'queued' }]);
    expect(await q('t_canaries_left', 'SELECT job_id::text FROM canaries')).toEqual([{ job_id: jobs[1]!.job_id }]);
    expect(await q('t_leases_left', 'SELECT count(*)::int AS n FROM job_leases')).toEqual([{ n: 0 }]);
    const kept = await q<{ job_id: string; result: unknown; hashed: boolean; points: number }>(
      't_results_left',
      'SELECT job_id, result, length(result_hash) = 32 AS hashed, points::float8 AS points FROM job_results ORDER BY job_id',
    );
    expect(kept).toHaveLength(4);
    for (const r of kept) expect(r).toMatchObject({ result: null, hashed: true, points: 1 });
    expect((await user.result(jobs[0]!.job_id)).statusCode).toBe(404);
    expect((await user.result(canceled)).statusCode).toBe(404);

    // Points, rosters, the total of history, the aggregates and the ledger: as they were.
    expect(await looks(nodeKey, worker.token)).toEqual(before);
    await aggregatesExact();
    expect(await checkDatabase(t.db, 30)).toMatchObject({ days: [day(3), day(2)], differences: [] });

    // Replays of old reports: never a second credit.
    // The seed wire, same report (keys in another order): a replay; another result or node: 409.
    const reordered = { ...seed, result: { a: { y: 'é', z: 1 }, b: [1, 2], message: 'hello' } };
    expect((await worker.post('/worker/update_result', reordered)).json()).toEqual({
      job_id: 'seed-1',
      status: 'success',
      points: 0,
      replayed: true,
    });
    expect((await worker.post('/worker/update_result', { ...seed, result: { message: 'other' } })).statusCode).toBe(409);
    expect((await worker.post('/worker/update_result', { ...seed, status: 'error' })).statusCode).toBe(409);
    const otherKey = await t.addNode('beta');
    expect((await worker.post('/worker/update_result', { ...seed, api_key: otherKey })).statusCode).toBe(409);
    // The job key of a deleted lease is unknown: refused, nothing credited.
    const old = await worker.report(jobs[0]!);
    expect(old.statusCode).toBe(400);
    expect(old.json()).toEqual({ detail: 'Unknown job key' });
    // The dispatched job's id with the node key: its credit is found, the same answer is a replay.
    const byNodeKey = {
      job_id: jobs[1]!.job_id,
      api_key: nodeKey,
      model_name: MODEL,
      result: { message: { role: 'assistant', content: `answer to ${jobs[1]!.job_id}` } },
      status: 'success',
    };
    expect((await worker.post('/worker/update_result', byNodeKey)).json()).toMatchObject({ points: 0, replayed: true });
    expect((await worker.post('/worker/update_result', { ...byNodeKey, result: { message: 'forged' } })).statusCode).toBe(409);
    expect((await worker.post('/worker/update_result', { ...byNodeKey, api_key: otherKey })).statusCode).toBe(409);
    // Nothing moved.
    expect(await looks(nodeKey, worker.token)).toEqual({ ...before, totals: before.totals });
    expect(await checkDatabase(t.db, 30)).toMatchObject({ differences: [] });
    const metrics = await metricsText();
    expect(metrics).toContain('ins_retention_pruned_total{what="jobs"} 4');
    expect(metrics).toContain('ins_retention_pruned_total{what="results"} 4');
  });

  it('deletes usage counters of past days, idle fair-queue lanes and sessions long unseen; keeps what is read or still counts', async () => {
    const { user, worker, open } = await start();
    const keyId = (await q<{ id: number }>('t_key', "SELECT id::int FROM api_keys WHERE kind = 'user'"))[0]!.id;
    const other = (await t.addUser('other')) && (await q<{ id: number }>('t_key2', "SELECT id::int FROM api_keys WHERE label = 'other'"))[0]!.id;
    const modelId = (await q<{ id: number }>('t_model', 'SELECT id FROM models WHERE name = $1::text', [MODEL]))[0]!.id;
    const oldModel = (await q<{ id: number }>('t_old_model', "INSERT INTO models (name) VALUES ('old-model') RETURNING id"))[0]!.id;
    const epochAgo = (days: number) => Date.now() / 1000 - days * DAY;
    // Usage: 20 and 10 days ago (past the 8 days any job lives), 3 days ago (not), today's (from start()).
    for (const ago of [20, 10, 3]) {
      await q(
        't_usage',
        'INSERT INTO key_usage (key_id, day, model_id, jobs, tokens) VALUES ($1::bigint, $2::date, 0, 5, 50), ($1::bigint, $2::date, $3::int, 5, 50)',
        [keyId, day(ago), modelId],
      );
    }
    // The still-queued job counts on the day 10 days ago (submitted then): that day and later stay.
    await q('t_open_day', 'UPDATE jobs SET usage_day = $2::date WHERE id = $1::uuid', [open, day(10)]);
    // Lanes: one of a model nobody queues for, idle for 10 days (equivalent to no lane: goes);
    // one as old but not a step behind its model's queue, whose oldest job has an even older key (stays);
    // the user's own, recent (stays).
    await q('t_open_key', 'UPDATE jobs SET fair_key = $2::float8 WHERE id = $1::uuid', [open, epochAgo(10) - 0.5]);
    await q(
      't_lanes',
      'INSERT INTO fair_lanes (owner_key_id, model_id, last_key) VALUES ($1::bigint, $3::int, $4::float8), ($2::bigint, $5::int, $4::float8)',
      [keyId, other, oldModel, epochAgo(10), modelId],
    );
    // Sessions: alpha's live one, an ended one 20 days old and a crashed one 10 days old (go); beta's
    // only session, crashed 30 days ago (stays: it is beta's "last seen").
    await t.addNode('beta');
    const session = (node: string, ago: number, ended: boolean) =>
      q(
        't_session',
        `INSERT INTO node_sessions (node_id, token_hash, node_key_hash, started_at, last_seen_at, ended_at)
      SELECT n.id, md5(random()::text) || md5(random()::text), n.key_hash, now() - make_interval(days => $2::int + 1), now() - make_interval(days => $2::int),
        CASE WHEN $3::boolean THEN now() - make_interval(days => $2::int) END FROM nodes n WHERE n.name = $1::text`,
        [node, ago, ended],
      );
    await session('alpha', 20, true);
    await session('alpha', 10, false);
    await session('beta', 30, false);
    const usageDays = async () =>
      (await q<{ day: string }>('t_usage_days', "SELECT DISTINCT to_char(day, 'YYYY-MM-DD') AS day FROM key_usage ORDER BY 1")).map((r) => r.day);
    const lanes = async () =>
      (await q<{ model_id: number }>('t_lanes_left', 'SELECT model_id FROM fair_lanes ORDER BY model_id, owner_key_id')).map((r) => r.model_id);
    const sessions = async () =>
      q<{ name: string; ended: boolean }>(
        't_sessions_left',
        'SELECT n.name, s.ended_at IS NOT NULL AS ended FROM node_sessions s JOIN nodes n ON n.id = s.node_id ORDER BY s.last_seen_at DESC',
      );

    // Token-level check records: one judged 10 days ago (goes), one 3 days ago (stays).
    for (const ago of [10, 3]) {
      await q(
        't_token_check',
        `INSERT INTO token_checks (check_id, job_id, node_id, model_id, checker_id, method, positions, top1, mismatches, evidence, cusum, at)
        SELECT gen_random_uuid(), gen_random_uuid(), n.id, $2::int, n.id, 'prefill', 32, 0.9, 0, 0, 0, now() - make_interval(days => $1::int) FROM nodes n WHERE n.name = 'alpha'`,
        [ago, modelId],
      );
    }
    const tokenChecks = async () =>
      (await q<{ days: number }>('t_token_checks_left', 'SELECT round(extract(epoch FROM now() - at) / 86400)::int AS days FROM token_checks')).map(
        (r) => r.days,
      );

    expect(await t.app.service.retention.prune()).toMatchObject({ usage: 2, lanes: 1, sessions: 2, tokenChecks: 1, busy: false });
    expect(await tokenChecks()).toEqual([3]);
    expect(await usageDays()).toEqual([day(10), day(3), day(0)]);
    expect(await lanes()).toEqual([modelId, modelId]);
    expect(await sessions()).toEqual([
      { name: 'alpha', ended: false },
      { name: 'beta', ended: false },
    ]);
    // The live worker goes on; the user's quota counters of today are as they were.
    expect((await worker.getJobRaw()).statusCode).toBe(200);
    expect((await t.app.inject({ url: '/usage', headers: { api_key: user.key } })).json()).toMatchObject({ day: day(0), used: { jobs: 5 } });

    // Once the job of that day is over (canceled: its tokens given back to that day's row), the
    // day goes; and its model's queue is empty: the old lane, now a step behind the clock, goes.
    expect((await cancel(user, open)).statusCode).toBe(200);
    expect(await t.app.service.retention.prune()).toMatchObject({ usage: 2, lanes: 1, sessions: 0 });
    expect(await usageDays()).toEqual([day(3), day(0)]);
    expect(await lanes()).toEqual([modelId]);
    expect(await t.app.service.retention.prune()).toMatchObject({ usage: 0, lanes: 0, sessions: 0 });
    const metrics = await metricsText();
    expect(metrics).toContain('ins_retention_pruned_total{what="usage"} 4');
    expect(metrics).toContain('ins_retention_pruned_total{what="sessions"} 2');
  });

  it('does nothing with a window of 0 (keep all)', async () => {
    await start();
    await t.app.ledger.closer.closeDue();
    const off = retention(0);
    expect(off.enabled).toBe(false);
    expect(await off.prune()).toBeUndefined();
    expect(await q('t_all_jobs', 'SELECT count(*)::int AS n FROM jobs')).toEqual([{ n: 5 }]);
  });

  it.skipIf(backend.name === 'pglite')('prunes on one server at a time: another holding the lock finds it busy and stops', async () => {
    await start();
    await t.app.ledger.closer.closeDue();
    await t.db.transaction(async (tx) => {
      await tx.query(sql('t_hold_lock', `SELECT pg_advisory_xact_lock(${RETENTION_LOCK})`));
      expect(await t.app.service.retention.prune()).toEqual({ ...NOTHING_PRUNED, busy: true });
    });
    expect(await t.app.service.retention.prune()).toMatchObject({ jobs: 4, results: 4, busy: false });
  });

  it('counts jobs ever per state exactly under concurrent writes, from counters', async () => {
    t = await startApp(backend);
    const user = new TestUser(t.app, await t.addUser());
    const workers = await Promise.all(['n1', 'n2', 'n3', 'n4'].map(async (n) => new TestWorker(t.app, n, await t.addNode(n)).start([MODEL])));
    const ids = await Promise.all(Array.from({ length: 40 }, (_, i) => user.submit(MODEL, `p${i}`)));
    // Four workers take and finish jobs while more are submitted and some canceled, all at once.
    await Promise.all([
      ...workers.map(async (w) => {
        for (let i = 0; i < 6; i++) {
          const job = await w.getJob();
          if (job) await w.report(job, 'ok', i % 3 === 2 ? 'error' : 'success');
        }
      }),
      ...Array.from({ length: 20 }, (_, i) => user.submit(MODEL, `more ${i}`)),
      ...ids.slice(30).map((id) => cancel(user, id)),
    ]);
    const expected = await counted();
    expect(expected.total_job_count).toBe(60);
    expect(await totals()).toEqual(expected);
    // The read is of the counters, not of the jobs.
    expect(await q('t_counters', 'SELECT sum(jobs)::int AS n FROM job_counts')).toEqual([{ n: 60 }]);
  });
});
