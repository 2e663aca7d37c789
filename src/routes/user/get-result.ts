// GET /get_result/{job_id}: the owner reads its job's answer. While the job is open: 404 (real
// clients poll every few seconds until they get something else), with where it stands — state,
// position in its model's queue, an estimate of the wait (ours) —, answered from memory when
// this server knows the job is open (jobs/open-jobs.ts), so polls of a pending job cost no
// statement; nor does the poll that gets the answer of a polled job this server finished.
// `wait` (ours) waits for the job to become final first, woken by the coordinator
// (jobs/watch.ts), not by polling; such a long poll tells nginx not to buffer it
// (X-Accel-Buffering; deploy/nginx/ins.conf). Past the long-poll caps of its key or address
// (http/rate-limit.ts LongPolls) it answers at once, as with wait=0: the seed's clients poll
// anyway, and a new status would stop them.
// GET /get_completion_time/{job_id}: how long the job took.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { GetCompletionTimeParams, GetCompletionTimeResponses, GetResultParams, GetResultQuery, GetResultResponses } from '../../generated/schemas.js';
import type { UserJob } from '../../jobs/read.js';
import type { Standing } from '../../jobs/open-jobs.js';
import { FINAL_STATES } from '../../jobs/states.js';
import type { Finished } from '../../jobs/watch.js';
import { HttpError } from '../../http/http-error.js';
import { authenticateUser } from '../authenticate.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';
import { UNCHECKED_DETAIL } from '../openai/completion.js';
import { isUnavailable } from '../../db/errors.js';

const NOT_FOUND = 'Job not found';
/** Why a finished wait's listener is told to stop (jobs/watch.ts ignores the reason). */
const WAIT_OVER = 'wait over';

// A done job's usage is shown when its node counted it; an estimate (the seed's workers count
// none, jobs/answer.ts) is charged but not shown here, so that the seed's jobs keep the seed's
// body field for field. /v1 and GET /usage show it.
// Checked delivery (docs/verification.md): a checked answer says so (`delivery`); one nobody
// could check is withheld: `failed`, as a job no node finished, with `delivery: "unchecked"`.
function resultOf(job: Pick<UserJob, 'state' | 'result' | 'usage'> & { detail?: string | null; delivery?: UserJob['delivery'] }, jobId: string) {
  if (job.state === 'done' && job.delivery === 'unchecked')
    return {
      status: 'failed' as const,
      job_id: jobId,
      detail: UNCHECKED_DETAIL,
      result: { message: { role: 'assistant', content: '' } },
      delivery: 'unchecked' as const,
    };
  if (job.state === 'done')
    return {
      status: 'success' as const,
      job_id: jobId,
      result: job.result!,
      ...(job.usage && !job.usage.estimated ? { usage: job.usage } : {}),
      ...(job.delivery === 'checked' ? { delivery: 'checked' as const } : {}),
    };
  return {
    status: job.state as 'failed' | 'expired' | 'canceled',
    job_id: jobId,
    detail: job.detail ?? job.state,
    result: { message: { role: 'assistant', content: '' } },
  };
}

/** The 404 of a done job whose answer waits for its check (checked delivery). */
const checking = (reply: FastifyReply) => reply.code(404).send({ detail: 'Job not finished', state: 'checking', position: 0, eta_seconds: null });

/** The 404 of an open job: `detail` as the seed's clients know it, and where the job stands. */
const pending = (reply: FastifyReply, s: Standing) =>
  reply.code(404).send({ detail: 'Job not finished', state: s.state, position: s.position ?? null, eta_seconds: s.eta_seconds ?? null });

export function getResultRoutes(app: App, deps: Deps): void {
  const { limiters } = deps;
  const { coordinator } = deps.service;
  // A short database outage (a restart, a failover) is ridden out here, as the worker routes do
  // (db/outage.ts): the seed's clients read result.message.content from any answer but a 404, so
  // a 503 ends their poll with an error, and the job they submitted is lost to them (an outside
  // probe: 1 poll in 79 under killed connections, 2 jobs in 12 across a 10 s restart). Past the
  // budget the answer is still a 404, saying why and with Retry-After: they poll again.
  const readOwn = (jobId: string, owner: number) => rideOutage(() => coordinator.ownJob(jobId, owner));
  // Not `return await getResult(…)` in an async handler: a FastifyReply is a thenable that waits
  // for the response to be written, and each async function it is returned through waits on it
  // again (20 µs of a pending poll's 210, bench/request-cost.ts).
  app.get('/get_result/:job_id', { schema: { params: GetResultParams, querystring: GetResultQuery, response: GetResultResponses } }, (req, reply) =>
    getResult(req, reply, req.params.job_id, req.query.wait).catch((err: unknown) => {
      if (!isUnavailable(err)) throw err;
      void reply.code(404).header('retry-after', '1').send({ detail: 'Job status unknown for now: the database is unavailable; retry later' });
    }),
  );

  async function getResult(req: FastifyRequest, reply: FastifyReply, job_id: string, wait: number | undefined) {
    const asked = (wait ?? 0) * 1000;
    if (asked > 0) reply.header('x-accel-buffering', 'no');
    const owner = await rideOutage(() => authenticateUser(deps, req));
    const release = asked > 0 ? limiters.longPolls.enter(`user:${owner}`, req.ip) : undefined;
    const waitMs = release ? asked : 0;
    if (waitMs === 0) {
      const done = coordinator.doneJob(job_id, owner);
      if (done) {
        deps.metrics.finishedPolls.inc({ source: 'memory' });
        return resultOf(done, job_id);
      }
      const known = coordinator.pendingJob(job_id, owner);
      if (known) {
        deps.metrics.pendingPolls.inc({ source: 'memory' });
        return pending(reply, known);
      }
    }
    const stop = new AbortController();
    try {
      // A wait for a job this server knows to be open (it submitted it, or read it open) needs no
      // read: the waiter is registered in this same turn, before any announcement of the job's end
      // can be applied, so that announcement wakes it (jobs/open-jobs.ts trusts announcements only
      // while LISTEN is live; otherwise nothing is known and the job is read).
      const known = waitMs > 0 ? coordinator.knownOpen(job_id, owner) : undefined;
      if (known) return await afterWait(await coordinator.waitFinal(job_id, waitMs, stop.signal), known);
      // Listening before the first read: a job finishing in between still wakes us.
      const woken = waitMs > 0 ? coordinator.waitFinal(job_id, waitMs, stop.signal) : undefined;
      const job = await readOwn(job_id, owner);
      if (!job) throw new HttpError(404, NOT_FOUND);
      if (job.delivery === 'held' && job.state === 'done') return await whenChecked();
      if (FINAL_STATES.has(job.state)) {
        if (waitMs === 0) deps.metrics.finishedPolls.inc({ source: 'database' });
        return resultOf(job, job_id);
      }
      const standing = coordinator.seenOpen(job, owner);
      return await afterWait(await woken, standing);
    } finally {
      // A constant reason: abort() without one builds a DOMException, stack and all, per request.
      stop.abort(WAIT_OVER);
      release?.();
    }

    /** The answer once the wait ended: woken (the job is final) or not (still open: where it stands). */
    async function afterWait(finished: Finished | undefined, standing: Standing) {
      if (finished?.done) return resultOf(finished.done, job_id);
      const again = finished && (await readOwn(job_id, owner));
      if (again?.delivery === 'held' && again.state === 'done') return whenChecked();
      if (!again || !FINAL_STATES.has(again.state)) {
        deps.metrics.pendingPolls.inc({ source: 'database' });
        return pending(reply, coordinator.pendingJob(job_id, owner) ?? standing);
      }
      return resultOf(again, job_id);
    }

    /** A done job held for its check: its answer once the check passed within the wait, else still pending (state `checking`). */
    async function whenChecked() {
      const until = Date.now() + waitMs;
      for (let left = waitMs; left > 0; left = until - Date.now()) {
        await coordinator.waitDelivery(job_id, left, stop.signal);
        const again = await readOwn(job_id, owner);
        if (again && again.delivery !== 'held') return resultOf(again, job_id);
      }
      deps.metrics.pendingPolls.inc({ source: 'database' });
      return checking(reply);
    }
  }

  app.get('/get_completion_time/:job_id', { schema: { params: GetCompletionTimeParams, response: GetCompletionTimeResponses } }, async (req) => {
    const owner = await authenticateUser(deps, req);
    const job = await coordinator.ownJob(req.params.job_id, owner);
    if (!job) throw new HttpError(404, NOT_FOUND);
    return { job_id: job.id, status: job.state, completion_time: job.seconds, submitted_at: job.submitted_at, finished_at: job.finished_at };
  });
}
