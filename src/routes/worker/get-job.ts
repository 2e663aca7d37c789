// GET /worker/get_job: the oldest queued job of a model this worker declared, leased to it,
// or {"job_data": null}. `wait` (ours) long-polls: the answer comes the moment a job is
// queued, on this server or another (jobs/dispatcher.ts). A valid token never gets a 400 here:
// the real worker stops on one.
import { GetJobQuery, GetJobResponses } from '../../generated/schemas.js';
import { authenticateSession } from '../authenticate.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';

export function getJobRoute(app: App, deps: Deps): void {
  const { coordinator } = deps;
  app.get('/worker/get_job', { schema: { querystring: GetJobQuery, response: GetJobResponses } }, (req) => rideOutage(async () => {
    const session = await authenticateSession(deps, req);
    const gone = () => req.raw.socket.destroyed;
    const job = await coordinator.next(session, (req.query.wait ?? 0) * 1000, gone);
    if (!job) return { job_data: null };
    if (gone()) {
      // Nobody is there to get it: the lease goes back, and counts as no attempt.
      await coordinator.undeliver(job);
      return { job_data: null };
    }
    const { messages, max_output, temperature, seed, stream } = job.request;
    return { job_data: { job_id: job.jobId, api_key: job.jobKey, model: job.model, messages, max_output, temperature, ...(seed !== undefined ? { seed } : {}), ...(stream ? { stream } : {}) } };
  }));
}
