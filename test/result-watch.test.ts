// Waiting for a job's end (src/jobs/watch.ts): a waiter ends when the job is final, on abort,
// and at once when its signal was aborted before it started waiting — a client that hung up
// while its job was being submitted (the OpenAI-compatible API then cancels the job, rather
// than leaving it queued until its deadline).
import { describe, expect, it } from 'vitest';
import { ResultWatch } from '../src/jobs/watch.js';

const watch = () =>
  new ResultWatch(
    async () => [],
    (err) => {
      throw err;
    },
  );
/** Settles after the pending I/O callbacks: whatever was going to end at once has ended by then. */
const stillWaiting = () => new Promise<'still waiting'>((resolve) => setImmediate(() => resolve('still waiting')));

describe('waiting for a job to end', () => {
  it('ends at once when the signal was aborted before the wait', async () => {
    expect(await Promise.race([watch().wait('job', 60_000, AbortSignal.abort()), stillWaiting()])).toBeUndefined();
  });

  it('ends on a later abort, and when the job is announced final (no answer at hand: an empty Finished)', async () => {
    const w = watch();
    const gone = new AbortController();
    const aborted = w.wait('job-1', 60_000, gone.signal);
    expect(await Promise.race([aborted, stillWaiting()])).toBe('still waiting');
    gone.abort();
    expect(await aborted).toBeUndefined();
    const finished = w.wait('job-2', 60_000);
    w.finished(['job-2']);
    expect(await finished).toEqual({});
  });
});
