// The dispatcher's own rules (src/jobs/dispatcher.ts), where timing decides and a test through
// the app could only hope to hit the moment: the store here is a stand-in for the database
// whose lease rounds the test holds open and answers. The same rules run against the real
// databases in test/coordinator.test.ts and test/verification.test.ts.
import { describe, expect, it } from 'vitest';
import { Dispatcher, type DispatchStore } from '../src/jobs/dispatcher.js';
import type { Ask, Group, LeaseRound } from '../src/jobs/sql/lease.js';
import type { SessionRow } from '../src/repositories/sessions.js';
import { tick } from './helpers/wait.js';

const MODEL = 7;
const session = (id: number): SessionRow => ({ id, node: { id, name: `n-${id}`, disabled: false, suspended: false }, capacity: 1, models: [MODEL] });

/** A store whose rounds wait until the test answers them. */
class HeldStore implements DispatchStore {
  readonly rounds: { asks: Ask[]; groups: Group[]; answer: (r: LeaseRound) => void }[] = [];
  undelivered = 0;
  lease(asks: Ask[], groups: Group[]): Promise<LeaseRound> {
    return new Promise((answer) => this.rounds.push({ asks, groups, answer }));
  }
  async undeliver(): Promise<void> {
    this.undelivered++;
  }
  async abandonOldest(): Promise<void> {}
  async queuedModels(): Promise<{ jobs: number[]; copies: number[] }> {
    return { jobs: [], copies: [] };
  }
}
const leased = (jobId: string) => ({
  group: 1,
  slot: 1,
  jobId,
  model: 'm',
  request: { messages: [], max_output: 0, temperature: 0 },
  attempt: 1,
  queuedSeconds: 0,
  prefix: '',
});
const nothing: LeaseRound = { rows: [], jobsLeft: new Set(), copiesLeft: new Set() };

/** A live dispatcher with session 1 long-polling, after its first look found nothing: the model is known empty. */
async function oneWaiting() {
  const store = new HeldStore();
  const d = new Dispatcher(store, {
    recheckMs: 60_000,
    onError: (err) => {
      throw err;
    },
  });
  d.setLive(true);
  const first = d.next(session(1), 10_000, () => false);
  await tick();
  store.rounds.shift()!.answer(nothing);
  await tick();
  return { store, d, first };
}

describe('dispatcher', () => {
  it('answers a poll that arrives after close() at once, with no job and no lease round', async () => {
    const { store, d, first } = await oneWaiting();
    d.close();
    expect(await first).toBeNull();
    // A worker's next poll on its still-open connection: before, it waited out its whole wait and
    // held the server's stop past a container's 10 s (an outside probe: exit 137). An hour here,
    // past the test's timeout, so only an answer at once passes.
    expect(await d.next(session(2), 3_600_000, () => false)).toBeNull();
    expect(await d.next({ ...session(3), models: [] }, 3_600_000, () => false)).toBeNull();
    expect(store.rounds).toHaveLength(0);
  });

  it('does not let a submission claim a poll whose round is looking, so one poll never gets two leases', async () => {
    const { store, d, first: got } = await oneWaiting();
    const [claim] = d.claim(new Map([[MODEL, 1]])).get(MODEL)!;
    d.settleClaim(claim!, { ...leased('job-1'), group: 0, slot: 0 });
    expect((await got)?.jobId).toBe('job-1');
    // Another poll: the model is known empty, so it does not look.
    const again = d.next(session(2), 10_000, () => false);
    await tick();
    expect(store.rounds).toHaveLength(0);
    // A copy is queued: the poll looks; while its statement runs, a submission finds nobody to claim.
    d.queued(new Map([[MODEL, 1]]), 'copies');
    await tick();
    expect(store.rounds).toHaveLength(1);
    const looking = store.rounds[0]!;
    expect(looking.asks.map((a) => a.sessionId)).toEqual([2]);
    expect(d.claim(new Map([[MODEL, 1]])).get(MODEL)).toEqual([]);
    looking.answer({ rows: [leased('copy-1')], jobsLeft: new Set(), copiesLeft: new Set() });
    expect((await again)?.jobId).toBe('copy-1');
    expect(store.undelivered).toBe(0);
    d.close();
  });

  it('lets a new long poll wait quietly while copies may be queued, but a poll that looks once looks for them', async () => {
    const { store, d, first } = await oneWaiting();
    // Copies were queued that this poll could not take (it ran the job): the model may still have some.
    d.queued(new Map([[MODEL, 1]]), 'copies');
    await tick();
    store.rounds.shift()!.answer({ rows: [], jobsLeft: new Set(), copiesLeft: new Set([1]) });
    await tick();
    const long = d.next(session(2), 10_000, () => false);
    await tick();
    expect(store.rounds).toHaveLength(0);
    const once = d.next(session(3), 0, () => false);
    await tick();
    expect(store.rounds.map((r) => r.asks.map((a) => a.sessionId))).toEqual([[3]]);
    store.rounds.shift()!.answer(nothing);
    expect(await once).toBeNull();
    d.close();
    expect([await first, await long]).toEqual([null, null]);
  });
});
