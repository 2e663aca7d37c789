// POST /worker/job_progress (ours): partial output of a streamed job, kept with its lease and
// relayed to the client streaming it (jobs/progress.ts); an empty delta is a heartbeat. The job
// key proves the lease; a lease that has ended (canceled, expired, finished elsewhere) is
// refused with 400, so its worker stops working on it. Nothing here is credited.
import { JobProgressRequest, JobProgressResponses } from '../../generated/schemas.js';
import { hashKey, isWellFormedKey, keyKind } from '../../keys.js';
import { HttpError } from '../../http/http-error.js';
import { storableText } from '../../validation/pydantic.js';
import type { App, Deps } from '../types.js';

/** Most job keys whose last piece's trailing high surrogate is held at once (the oldest go first). */
const MAX_HELD = 10_000;

/** Whether the text ends with the first half of a UTF-16 pair. */
const endsInHighSurrogate = (s: string): boolean => {
  const last = s.charCodeAt(s.length - 1);
  return last >= 0xd800 && last <= 0xdbff;
};

/**
 * A piece that ends inside a UTF-16 pair (a worker cutting text by length, mid-emoji): its high
 * surrogate is held back, per job key, and goes out with the next piece, which begins with the
 * pair's other half. Each half alone would be a lone surrogate, kept as U+FFFD, and the streamed
 * text would no longer be the beginning of the answer of record (answer_diverged). On this
 * server: a next piece sent to another server finds nothing held, and its half is U+FFFD.
 */
export class SplitPairs {
  private readonly held = new Map<string, string>();

  /** Halves held now. */
  get size(): number {
    return this.held.size;
  }

  /**
   * The delta to keep: a held half before it, its own trailing high surrogate held back. Only for
   * a key the service could have issued, held by its hash: what a stranger sends takes no memory.
   */
  join(apiKey: string, delta: string): string {
    if (this.held.size === 0 && !endsInHighSurrogate(delta)) return delta;
    if (keyKind(apiKey) !== 'job' || !isWellFormedKey(apiKey)) return delta;
    return this.joinHeld(hashKey(apiKey), delta);
  }

  private joinHeld(key: string, delta: string): string {
    const before = this.held.get(key);
    if (before !== undefined) this.held.delete(key);
    const text = before === undefined ? delta : before + delta;
    if (!endsInHighSurrogate(text)) return text;
    if (this.held.size >= MAX_HELD) this.held.delete(this.held.keys().next().value!);
    this.held.set(key, text.slice(-1));
    return text.slice(0, -1);
  }
}

export function jobProgressRoute(app: App, { service: { coordinator }, limiters }: Deps): void {
  const pairs = new SplitPairs();
  app.post(
    '/worker/job_progress',
    {
      schema: { body: JobProgressRequest, response: JobProgressResponses },
      ...(limiters.progress ? { preHandler: limiters.progress } : {}),
      // As a job key's report (routes/update-result.ts): a NUL or an unpaired surrogate becomes
      // U+FFFD — but for a pair split between two pieces, which is joined (SplitPairs).
      preValidation: (req, _reply, done) => {
        const body = req.body as Record<string, unknown> | null;
        if (typeof body === 'object' && body !== null && typeof body.delta === 'string') {
          body.delta = storableText(typeof body.api_key === 'string' ? pairs.join(body.api_key, body.delta) : body.delta);
        }
        done();
      },
    },
    async (req) => {
      const { job_id, api_key, delta } = req.body;
      if (!(await coordinator.publishProgress(hashKey(api_key), job_id, delta))) {
        throw new HttpError(400, `No open lease of job ${job_id} for this job key: it was canceled, expired or finished; stop working on it`);
      }
      return { status: 'success' };
    },
  );
}
