// GET /get_result/{job_id}: the owner reads its job's answer. While the job is open: 404 (real
// clients poll every few seconds until they get something else); `wait` (ours) waits for the
// job to become final first, woken by the coordinator (jobs/watch.ts), not by polling.
// GET /get_completion_time/{job_id}: how long the job took.
import { GetCompletionTimeParams, GetCompletionTimeResponses, GetResultParams, GetResultQuery, GetResultResponses } from '../../generated/schemas.js';
import type { UserJob } from '../../jobs/read.js';
import { FINAL_STATES } from '../../jobs/states.js';
import { HttpError } from '../../http/http-error.js';
import { authenticateUser } from '../authenticate.js';
import type { App, Deps } from '../types.js';

const NOT_FOUND = 'Job not found';

function resultOf(job: Pick<UserJob, 'state' | 'result' | 'usage'> & { detail?: string | null }, jobId: string) {
  if (job.state === 'done') return { status: 'success' as const, job_id: jobId, result: job.result!, ...(job.usage ? { usage: job.usage } : {}) };
  return { status: job.state as 'failed' | 'expired' | 'canceled', job_id: jobId, detail: job.detail ?? job.state, result: { message: { role: 'assistant', content: '' } } };
}

export function getResultRoutes(app: App, deps: Deps): void {
  const { coordinator } = deps;
  app.get('/get_result/:job_id', { schema: { params: GetResultParams, querystring: GetResultQuery, response: GetResultResponses } }, async (req) => {
    const owner = await authenticateUser(deps, req);
    const { job_id } = req.params;
    const waitMs = (req.query.wait ?? 0) * 1000;
    // Listening before the first read: a job finishing in between still wakes us.
    const stop = new AbortController();
    const woken = waitMs > 0 ? coordinator.waitFinal(job_id, waitMs, stop.signal) : undefined;
    try {
      const job = await coordinator.ownJob(job_id, owner);
      if (!job) throw new HttpError(404, NOT_FOUND);
      if (FINAL_STATES.has(job.state)) return resultOf(job, job_id);
      const finished = await woken;
      if (finished?.done) return resultOf(finished.done, job_id);
      const again = finished && (await coordinator.ownJob(job_id, owner));
      if (!again || !FINAL_STATES.has(again.state)) throw new HttpError(404, 'Job not finished');
      return resultOf(again, job_id);
    } finally {
      stop.abort();
    }
  });

  app.get('/get_completion_time/:job_id', { schema: { params: GetCompletionTimeParams, response: GetCompletionTimeResponses } }, async (req) => {
    const owner = await authenticateUser(deps, req);
    const job = await coordinator.ownJob(req.params.job_id, owner);
    if (!job) throw new HttpError(404, NOT_FOUND);
    return { job_id: job.id, status: job.state, completion_time: job.seconds, submitted_at: job.submitted_at, finished_at: job.finished_at };
  });
}
