// Adaptive checking (issue 55; src/verify/check-rate.ts) through the real app on both backends,
// workers speaking the wire with inject, the auditor's draws seeded (Math.random from mulberry32):
// - honest nodes over many jobs are checked less with each hundred jobs, down to the floor, and
//   /network/nodes/{name} and `ins node audit` show each node's rate;
// - an impostor joining a network of proven nodes is suspended within as few of its jobs as
//   under fixed checking (both figures printed; docs/verification.md states them);
// - a disagreement ends both parties' runs: their jobs are checked at the full rate again.
// ADAPTIVE_JOBS raises the honest network's jobs (400 by default; 2,000 as the issue asks).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { runCommand } from '../src/cli/commands.js';
import { bufferIo } from '../src/cli/io.js';
import { DEFAULT_VERIFY, type VerifyConfig } from '../src/config-verify.js';
import { checkRate } from '../src/verify/check-rate.js';
import { rng } from '../scripts/tiny-gguf.js'; // mulberry32: the same numbers every run
import { backends } from './helpers/db.js';
import { auditWaits } from './helpers/audits.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker, type Job } from './helpers/coordinator.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { prose } from './helpers/behaviours.js';

const MODEL = 'adaptive-model';
const JOBS = Math.max(200, Math.ceil(Number(process.env.ADAPTIVE_JOBS ?? 400) / 100) * 100);
// Workers here answer at once: speed is not judged. No scorer: checks are text copies.
const VERIFY: Partial<VerifyConfig> = { enabled: true, probeInterval: 0, maxTokensPerSecond: 0, spotShare: 0 };

describe('the check rate', () => {
  const c = { share: 0.05, floor: 0.01, probationAgreements: 10 };
  it('is the full rate while new, 1 on probation, then VERIFY_SHARE × N / run down to the floor', () => {
    expect(checkRate({ standing: 'trusted', run: 0 }, c)).toBe(0.05);
    expect(checkRate({ standing: 'trusted', run: 9 }, c)).toBe(0.05);
    expect(checkRate({ standing: 'trusted', run: 10 }, c)).toBe(0.05);
    expect(checkRate({ standing: 'trusted', run: 20 }, c)).toBeCloseTo(0.025, 10);
    expect(checkRate({ standing: 'trusted', run: 50 }, c)).toBeCloseTo(0.01, 10);
    expect(checkRate({ standing: 'trusted', run: 5_000 }, c)).toBe(0.01);
    expect(checkRate({ standing: 'probation', run: 5_000 }, c)).toBe(1);
    expect(checkRate({ standing: 'suspended', run: 0 }, c)).toBe(0);
    // A floor at or above the full rate is fixed checking.
    expect(checkRate({ standing: 'trusted', run: 5_000 }, { ...c, floor: 0.05 })).toBe(0.05);
    expect(checkRate({ standing: 'trusted', run: 5_000 }, { ...c, floor: 0.5 })).toBe(0.05);
  });
});

describe.each(backends)('adaptive checking on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => {
    vi.restoreAllMocks();
    await t?.close();
  });

  const start = async (verify: Partial<VerifyConfig>, nodes: string[], seed: number) => {
    vi.spyOn(Math, 'random').mockImplementation(rng(seed));
    t = await startApp(backend, { verify: { ...VERIFY, ...verify } });
    const user = new TestUser(t.app, await t.addUser());
    const workers = new Map<string, TestWorker>();
    for (const n of nodes) workers.set(n, await new TestWorker(t.app, n, await t.addNode(n)).start([MODEL]));
    return { user, workers };
  };
  const { q, settled, until, standing } = auditWaits(() => t.db, { timeoutMs: 120_000 });
  const prompt = (job: Job) => job.messages.at(-1)!.content;
  /** Every worker polls once and answers what it got, until every job is settled. */
  const serve = async (workers: Map<string, TestWorker>, answer: (node: string, job: Job) => string) => {
    await until('the jobs to settle', async () => {
      for (const [name, w] of workers) {
        const job = await w.getJob();
        if (job) expect((await w.report(job, answer(name, job))).statusCode).toBe(200);
      }
      return settled();
    });
  };
  const submitHundred = async (user: TestUser, from: number) => {
    const ids: string[] = [];
    for (let i = from; i < from + 100; i++)
      ids.push(await user.submit(MODEL, `question ${i}: what is worth knowing about ${i * 7}?`, { temperature: 0 }));
    return ids;
  };
  const copiesOf = async (ids: string[]) =>
    (await q<{ n: number }>('t_copies_of', "SELECT count(*)::int AS n FROM jobs WHERE kind = 'verify' AND verify_of = ANY($1::uuid[])", [ids]))[0]!.n;
  const rateOf = async (node: string, reader: string) => {
    const res = await t.app.inject({ method: 'GET', url: `/network/nodes/${node}`, headers: { api_key: reader } });
    expect(res.statusCode).toBe(200);
    return res.json() as { check_rate: number; agreements_in_a_row: number; standing: string };
  };

  it(`checks honest nodes less with each hundred jobs, down to the floor (${JOBS} jobs)`, { timeout: 600_000 }, async () => {
    const floor = JOBS >= 1_000 ? 0.1 : 0.2;
    const verify = { share: 1, floor, probationAgreements: 5 };
    const nodes = ['honest-1', 'honest-2', 'honest-3', 'honest-4'];
    const { user, workers } = await start(verify, nodes, 55);
    const perHundred: number[] = [];
    for (let from = 0; from < JOBS; from += 100) {
      const ids = await submitHundred(user, from);
      await serve(workers, (_n, job) => prose(MODEL, prompt(job)));
      perHundred.push(await copiesOf(ids));
    }
    console.log(`adaptive checking, ${backend.name}: checks per hundred jobs ${perHundred.join(', ')} (floor ${floor})`);
    // Every answer agreed: no strike, nobody on probation.
    expect((await q<{ n: number }>('t_strikes', 'SELECT count(*)::int AS n FROM node_strikes'))[0]!.n).toBe(0);
    // Less with each hundred until the floor, then about the floor (binomial noise: 4 standard deviations).
    const atFloor = 100 * floor;
    const noise = 4 * Math.sqrt(100 * floor * (1 - floor));
    expect(perHundred[0]!).toBeGreaterThan(atFloor + noise);
    for (let i = 1; i < perHundred.length; i++) expect(perHundred[i]!).toBeLessThanOrEqual(Math.max(perHundred[i - 1]!, atFloor + noise));
    for (const n of perHundred.slice(-2)) expect(Math.abs(n - atFloor)).toBeLessThanOrEqual(noise);
    // Each node's rate, as its view shows it, is the floor now.
    const reader = await t.addReader();
    for (const n of nodes) {
      const v = await rateOf(n, reader);
      expect(v).toMatchObject({ standing: 'trusted', check_rate: floor });
      expect(v.agreements_in_a_row).toBeGreaterThanOrEqual((verify.share * verify.probationAgreements) / floor);
    }
    const io = bufferIo();
    expect(await runCommand(t.db, ['node', 'audit', 'honest-1', '--json'], io, { verify: { ...DEFAULT_VERIFY, ...VERIFY, ...verify } })).toBe(0);
    expect(JSON.parse(io.stdout.join(''))).toMatchObject({ check_rate: floor, standing: 'trusted' });
    const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
    expect(stored).toEqual(recomputed);
  });

  /**
   * Proven honest nodes (300 jobs), then an impostor joins: how many of its jobs it answered
   * before its suspension, and the honest nodes' rates when it joined.
   */
  const impostorJobs = async (verify: Partial<VerifyConfig>, seed: number): Promise<{ jobs: number; honestRates: number[] }> => {
    const { user, workers } = await start(verify, ['honest-1', 'honest-2', 'honest-3'], seed);
    const honest = (_n: string, job: Job) => prose(MODEL, prompt(job));
    for (let from = 0; from < 300; from += 100) {
      await submitHundred(user, from);
      await serve(workers, honest);
    }
    const reader = await t.addReader();
    const honestRates: number[] = [];
    for (const n of ['honest-1', 'honest-2', 'honest-3']) honestRates.push((await rateOf(n, reader)).check_rate);
    workers.set('impostor', await new TestWorker(t.app, 'impostor', await t.addNode('impostor')).start([MODEL]));
    const answer = (n: string, job: Job) => prose(n === 'impostor' ? 'tiny-model' : MODEL, prompt(job));
    for (let from = 300; (await standing('impostor')) !== 'suspended'; from += 100) {
      expect(from).toBeLessThan(2_000);
      await submitHundred(user, from);
      await serve(workers, answer);
    }
    for (const n of ['honest-1', 'honest-2', 'honest-3']) expect(await standing(n)).not.toBe('suspended');
    const [row] = await q<{ n: number }>(
      't_impostor_jobs',
      `SELECT count(*)::int AS n FROM job_leases l JOIN jobs j ON j.id = l.job_id JOIN nodes n ON n.id = l.node_id
      WHERE n.name = 'impostor' AND l.outcome = 'done' AND j.kind = 'user'`,
    );
    return { jobs: row!.n, honestRates };
  };

  it('suspends an impostor joining proven nodes as fast as fixed checking does', { timeout: 600_000 }, async () => {
    // Fixed: a floor at the full rate. Adaptive: the honest nodes' rates have fallen well below it.
    const share = 0.2;
    const trials = Number(process.env.IMPOSTOR_TRIALS ?? 1);
    const fixed: number[] = [];
    const adaptive: number[] = [];
    for (let s = 0; s < trials; s++) {
      const f = await impostorJobs({ share, floor: share, probationAgreements: 5 }, 100 + s);
      expect(f.honestRates).toEqual([share, share, share]);
      fixed.push(f.jobs);
      await t.close();
      const a = await impostorJobs({ share, floor: 0.02, probationAgreements: 5 }, 100 + s);
      // The proven nodes were checked well below the full rate when it joined; it was checked at the full rate from its first job.
      for (const r of a.honestRates) expect(r).toBeLessThan(share / 2);
      adaptive.push(a.jobs);
      if (s < trials - 1) await t.close();
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    console.log(
      `impostor joining late, ${backend.name}: its jobs until suspension, fixed ${fixed.join(', ')} (mean ${mean(fixed)}), adaptive ${adaptive.join(', ')} (mean ${mean(adaptive)})`,
    );
    // A new node is checked at the full rate either way, and at every job once struck.
    for (const n of [...fixed, ...adaptive]) expect(n).toBeLessThanOrEqual(40);
  });

  it('a disagreement ends both parties’ runs: their jobs are checked at the full rate again', { timeout: 120_000 }, async () => {
    const verify = { share: 1, floor: 0.2, probationAgreements: 2 };
    const { user, workers } = await start(verify, ['a', 'b'], 7);
    await submitHundred(user, 0);
    await serve(workers, (_n, job) => prose(MODEL, prompt(job)));
    const reader = await t.addReader();
    expect((await rateOf('a', reader)).check_rate).toBeLessThan(1);
    expect((await rateOf('a', reader)).agreements_in_a_row).toBeGreaterThan(2);
    // One more job: the two answer it differently, and no third node can decide.
    await user.submit(MODEL, 'a question they answer apart', { temperature: 0 });
    vi.spyOn(Math, 'random').mockReturnValue(0);
    await serve(workers, (n, job) => prose(n === 'a' ? MODEL : 'tiny-model', prompt(job)));
    for (const n of ['a', 'b']) expect(await rateOf(n, reader)).toMatchObject({ agreements_in_a_row: 0, check_rate: 1, standing: 'trusted' });
  });
});
