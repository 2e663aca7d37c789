// GET /get_result/{job_id}: the owner reads its job's answer. While the job is open: 404 (real
// clients poll every few seconds until they get something else); `wait` (ours) waits for the
// job to become final first, woken by the coordinator (jobs/watch.ts), not by polling.
// GET /get_completion_time/{job_id}: how long the job took.
import { GetCompletionTimeParams, GetCompletionTimeResponses, GetResultParams, GetResultQuery, GetResultResponses } from '../../generated/schemas.js';
import { findOwnJob } from '../../jobs/read.js';
import { FINAL_STATES } from '../../jobs/states.js';
import { HttpError } from '../../http/http-error.js';
import { authenticateUser } from '../authenticate.js';
import type { App, Deps } from '../types.js';

const NOT_FOUND = 'Job not found';

export function getResultRoutes(app: App, deps: Deps): void {
  const { db, coordinator } = deps;
  app.get('/get_result/:job_id', { schema: { params: GetResultParams, querystring: GetResultQuery, response: GetResultResponses } }, async (req) => {
    const owner = await authenticateUser(deps, req);
    const { job_id } = req.params;
    const waitMs = (req.query.wait ?? 0) * 1000;
    // Listening before the first read: a job finishing in between still wakes us.
    const stop = new AbortController();
    const woken = waitMs > 0 ? coordinator.waitFinal(job_id, waitMs, stop.signal) : undefined;
    try {
      let job = await findOwnJob(db, job_id, owner);
      if (!job) throw new HttpError(404, NOT_FOUND);
      if (woken && !FINAL_STATES.has(job.state) && (await woken)) job = (await findOwnJob(db, job_id, owner))!;
      if (!FINAL_STATES.has(job.state)) throw new HttpError(404, 'Job not finished');
      if (job.state === 'done') return { status: 'success' as const, job_id, result: job.result!, ...(job.usage ? { usage: job.usage } : {}) };
      return { status: job.state as 'failed' | 'expired' | 'canceled', job_id, detail: job.detail ?? job.state, result: { message: { role: 'assistant', content: '' } } };
    } finally {
      stop.abort();
    }
  });

  app.get('/get_completion_time/:job_id', { schema: { params: GetCompletionTimeParams, response: GetCompletionTimeResponses } }, async (req) => {
    const owner = await authenticateUser(deps, req);
    const job = await findOwnJob(db, req.params.job_id, owner);
    if (!job) throw new HttpError(404, NOT_FOUND);
    return { job_id: job.id, status: job.state, completion_time: job.seconds, submitted_at: job.submitted_at, finished_at: job.finished_at };
  });
}
