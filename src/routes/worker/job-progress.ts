// POST /worker/job_progress (ours): partial output of a streamed job, relayed to the client
// streaming it (jobs/progress.ts). The job key proves the lease; nothing is stored or credited.
import { JobProgressRequest, JobProgressResponses } from '../../generated/schemas.js';
import { hashKey } from '../../keys.js';
import { HttpError } from '../../http/http-error.js';
import type { App, Deps } from '../types.js';

export function jobProgressRoute(app: App, { coordinator }: Deps): void {
  app.post('/worker/job_progress', { schema: { body: JobProgressRequest, response: JobProgressResponses } }, async (req) => {
    const { job_id, api_key, delta } = req.body;
    if (!(await coordinator.publishProgress(hashKey(api_key), job_id, delta))) throw new HttpError(400, `No open lease of job ${job_id} for this job key`);
    return { status: 'success' };
  });
}
