// rideOutage (src/db/outage.ts): the first attempt runs bare; an unavailable database is
// retried with backoff within the budget, anything else fails at once.
import { describe, expect, it } from 'vitest';
import { rideOutage } from '../src/db/outage.js';

const unavailable = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });

describe('rideOutage', () => {
  it('runs a succeeding attempt once', async () => {
    let calls = 0;
    expect(await rideOutage(() => Promise.resolve(++calls))).toBe(1);
    expect(calls).toBe(1);
  });

  it('fails at once on an error that is not an outage', async () => {
    let calls = 0;
    const bug = new Error('a bug');
    await expect(
      rideOutage(() => {
        calls++;
        return Promise.reject(bug);
      }),
    ).rejects.toBe(bug);
    expect(calls).toBe(1);
  });

  it('runs the attempt again while the database is unavailable, until it answers', async () => {
    let calls = 0;
    const value = await rideOutage(() => (++calls < 3 ? Promise.reject(unavailable()) : Promise.resolve('ok')));
    expect(value).toBe('ok');
    expect(calls).toBe(3);
  });

  it("gives up with the outage's error once the budget is spent", async () => {
    let calls = 0;
    const err = unavailable();
    await expect(
      rideOutage(() => {
        calls++;
        return Promise.reject(err);
      }, 1_000),
    ).rejects.toBe(err);
    // The first attempt and at least one retry; backoffs of 100-200, 200-400, 400-800 ms… leave room for a few at most.
    expect(calls).toBeGreaterThanOrEqual(2);
    expect(calls).toBeLessThanOrEqual(5);
  });
});
