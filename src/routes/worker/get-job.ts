// GET /worker/get_job: the oldest queued job of a model this worker declared, leased to it,
// or {"job_data": null}. `wait` (ours) long-polls: the answer comes the moment a job is
// queued, on this server or another (jobs/dispatcher.ts); such a long poll tells nginx not to
// buffer it (X-Accel-Buffering; deploy/nginx/ins.conf). Past the long-poll caps of its token or
// address (http/rate-limit.ts LongPolls) a poll answers at once, as with wait=0. A valid token
// never gets a 400 here: the real worker stops on one. A job another node began to stream
// carries that beginning (answer_prefix) for this node to continue. A session that declared
// capabilities (`ins worker`) also gets the job's OpenAI parameters (`params`, docs/openai.md);
// the seed's worker gets the seed's job_data, field for field.
import { GetJobQuery, GetJobResponses, type JobData } from '../../generated/schemas.js';
import { authenticateSession } from '../authenticate.js';
import type { App, Deps } from '../types.js';
import type { SessionRow } from '../../auth/principal.js';
import type { DeliveredJob } from '../../jobs/dispatcher.js';
import { rideOutage } from '../../db/outage.js';

/** A leased job as the worker gets it (openapi.json JobData): the seed's fields, and `params` for a session that declared capabilities. */
export function jobData(job: DeliveredJob, session: SessionRow): JobData {
  const { messages, max_output, temperature, seed, stream, params } = job.request;
  return {
    job_id: job.jobId,
    api_key: job.jobKey,
    model: job.model,
    messages,
    max_output,
    temperature,
    ...(seed !== undefined ? { seed } : {}),
    ...(stream ? { stream } : {}),
    ...(job.prefix ? { answer_prefix: job.prefix } : {}),
    ...(params && session.capable ? { params } : {}),
  };
}

export function getJobRoute(app: App, deps: Deps): void {
  const { limiters } = deps;
  const { coordinator } = deps.service;
  app.get('/worker/get_job', { schema: { querystring: GetJobQuery, response: GetJobResponses } }, (req, reply) =>
    rideOutage(async () => {
      if (req.query.wait) reply.header('x-accel-buffering', 'no');
      const session = await authenticateSession(deps, req);
      const gone = () => req.raw.socket.destroyed;
      const asked = (req.query.wait ?? 0) * 1000;
      const release = asked > 0 ? limiters.longPolls.enter(`session:${session.id}`, req.ip) : undefined;
      let job;
      try {
        job = await coordinator.next(session, release ? asked : 0, gone);
      } finally {
        release?.();
      }
      if (!job) return { job_data: null };
      if (gone()) {
        // Nobody is there to get it: the lease goes back, and counts as no attempt.
        await coordinator.undeliver(job);
        return { job_data: null };
      }
      return { job_data: jobData(job, session) };
    }),
  );
}
