// POST /worker/job_progress (ours): partial output of a streamed job, kept with its lease and
// relayed to the client streaming it (jobs/progress.ts); an empty delta is a heartbeat. The job
// key proves the lease; a lease that has ended (canceled, expired, finished elsewhere) is
// refused with 400, so its worker stops working on it. Nothing here is credited.
import { JobProgressRequest, JobProgressResponses } from '../../generated/schemas.js';
import { hashKey } from '../../keys.js';
import { HttpError } from '../../http/http-error.js';
import { storableText } from '../../validation/pydantic.js';
import type { App, Deps } from '../types.js';

export function jobProgressRoute(app: App, { service: { coordinator }, limiters }: Deps): void {
  app.post('/worker/job_progress', {
    schema: { body: JobProgressRequest, response: JobProgressResponses },
    ...(limiters.progress ? { preHandler: limiters.progress } : {}),
    // As a job key's report (routes/update-result.ts): a NUL or an unpaired surrogate becomes U+FFFD.
    preValidation: (req, _reply, done) => {
      const body = req.body as Record<string, unknown> | null;
      if (typeof body === 'object' && body !== null && typeof body.delta === 'string') body.delta = storableText(body.delta);
      done();
    },
  }, async (req) => {
    const { job_id, api_key, delta } = req.body;
    if (!(await coordinator.publishProgress(hashKey(api_key), job_id, delta))) {
      throw new HttpError(400, `No open lease of job ${job_id} for this job key: it was canceled, expired or finished; stop working on it`);
    }
    return { status: 'success' };
  });
}
