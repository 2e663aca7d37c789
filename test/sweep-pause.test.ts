// Time stands still for leases while no server sweeps (migrations/0026_sweep_clock.sql,
// src/jobs/sql/sweep.ts PAUSE): a lease that ran out while the service (or its database) was
// down is no failure of its node — it could neither report nor renew — so the first sweep after
// the gap gives the gap back to every lease open at the last sweep. A lease that had run out
// before the gap still ends as its node's failure.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';
import { LOCK_KEY as SWEEP_LOCK } from '../src/jobs/sql/sweep.js';

describe.each(backends)('leases across a gap in the sweeps on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let user: TestUser;
  let worker: TestWorker;
  const q = <R>(name: string, text: string, values: unknown[] = []) => t.db.query<R>(sql(name, text), values);

  beforeAll(async () => {
    t = await startApp(backend, { coordinator: { leaseTimeout: 120, sweepInterval: 0.2 } });
    user = new TestUser(t.app, await t.addUser());
    worker = await new TestWorker(t.app, 'paused-rig', await t.addNode('paused-rig')).start(['pause-model']);
  });
  afterAll(async () => t.close());

  // Holding the sweeps' lock, so that no sweep runs meanwhile: one under way would otherwise read
  // the clock rewound but the lease as it was (its statement's snapshot), and then write its own
  // end as the clock, as if there had been no gap.
  const betweenSweeps = (name: string, text: string, values: unknown[] = []) =>
    t.db.transaction(async (tx) => {
      await tx.query(sql('t_pause_lock', `SELECT pg_advisory_xact_lock(${SWEEP_LOCK})`));
      await tx.query(sql(name, text), values);
    });
  // The last sweep was `gap` seconds ago, and this lease ran out `ago` seconds ago.
  const rewind = (keyHashOf: string, gap: number, ago: number) =>
    betweenSweeps(
      't_pause_rewind',
      `WITH c AS (UPDATE sweep_clock SET swept_at = now() - make_interval(secs => $2::float8) RETURNING 1)
    UPDATE job_leases SET leased_at = now() - make_interval(secs => $2::float8 + 10), expires_at = now() - make_interval(secs => $3::float8)
    WHERE job_id = $1::uuid AND ended_at IS NULL AND EXISTS (SELECT 1 FROM c)`,
      [keyHashOf, gap, ago],
    );
  const lease = (jobId: string) =>
    q<{ open: boolean; outcome: string | null; live: boolean; paused: number }>(
      't_pause_lease',
      'SELECT ended_at IS NULL AS open, outcome, expires_at > now() AS live, paused_seconds AS paused FROM job_leases WHERE job_id = $1::uuid',
      [jobId],
    );

  it('gives a lease that ran out during the gap its time back: still open, its report credited, no failure counted', async () => {
    const jobId = await user.submit('pause-model', 'across the outage');
    const job = (await worker.getJob())!;
    // The service was down for 60 s; the lease ran out 30 s ago, when no server could hear the node.
    await rewind(jobId, 60, 30);
    await expect.poll(async () => (await lease(jobId))[0]!.paused).toBeGreaterThanOrEqual(60);
    expect(await lease(jobId)).toEqual([{ open: true, outcome: null, live: true, paused: expect.any(Number) }]);
    expect((await worker.report(job)).json()).toMatchObject({ status: 'success', points: 1, replayed: false });
    expect(await q('t_pause_failures', 'SELECT failures FROM jobs WHERE id = $1::uuid', [jobId])).toEqual([{ failures: 0 }]);
  });

  it('gives nothing to a lease taken after the last sweep (a server that starts after a long stop leases at once)', async () => {
    const jobId = await user.submit('pause-model', 'fresh after the stop');
    const job = (await worker.getJob())!;
    const before = await q<{ at: string }>('t_pause_at', 'SELECT expires_at::text AS at FROM job_leases WHERE job_id = $1::uuid', [jobId]);
    await betweenSweeps('t_pause_clock', "UPDATE sweep_clock SET swept_at = now() - interval '1 hour'");
    await expect
      .poll(
        async () =>
          (await q<{ recent: boolean }>('t_pause_ticked', "SELECT swept_at > now() - interval '1 minute' AS recent FROM sweep_clock"))[0]!.recent,
      )
      .toBe(true);
    expect(await q('t_pause_at', 'SELECT expires_at::text AS at FROM job_leases WHERE job_id = $1::uuid', [jobId])).toEqual(before);
    expect((await lease(jobId))[0]!.paused).toBe(0);
    expect((await worker.report(job)).statusCode).toBe(200);
  });

  it("still ends, as its node's failure, a lease that had run out before the gap", async () => {
    const jobId = await user.submit('pause-model', 'already late');
    await worker.getJob();
    // The last sweep was 20 s ago, but this lease had run out 30 s ago: that sweep should have ended it.
    await rewind(jobId, 20, 30);
    await expect.poll(async () => (await lease(jobId))[0]!.open).toBe(false);
    expect(await lease(jobId)).toEqual([{ open: false, outcome: 'expired', live: false, paused: 0 }]);
    expect(await q('t_pause_failures2', 'SELECT failures FROM jobs WHERE id = $1::uuid', [jobId])).toEqual([{ failures: 1 }]);
  });
});
