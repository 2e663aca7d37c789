// POST /cancel_job/{job_id} (ours): the owner cancels its job, queued or leased (the node
// learns it at its next job_progress or report, both refused with 400, and is credited
// nothing). Already canceled: the same answer again. Final otherwise: 409.
import { CancelJobParams, CancelJobResponses } from '../../generated/schemas.js';
import { HttpError } from '../../http/http-error.js';
import { isJobId } from '../../jobs/read.js';
import { authenticateUser } from '../authenticate.js';
import type { App, Deps } from '../types.js';

export function cancelJobRoute(app: App, deps: Deps): void {
  const { coordinator } = deps.service;
  app.post('/cancel_job/:job_id', { schema: { params: CancelJobParams, response: CancelJobResponses } }, async (req) => {
    const owner = await authenticateUser(deps, req);
    const { job_id } = req.params;
    if (!isJobId(job_id)) throw new HttpError(404, 'Job not found');
    const { before, canceled } = await coordinator.cancel(job_id, owner, 'canceled by its owner');
    if (before === undefined) throw new HttpError(404, 'Job not found');
    if (canceled || before === 'canceled') return { status: 'canceled' as const, job_id, was: before as 'queued' | 'leased' | 'canceled' };
    throw new HttpError(
      409,
      before === 'queued' || before === 'leased'
        ? `Job ${job_id} finished before it could be canceled`
        : `Job ${job_id} is ${before}: it cannot be canceled`,
    );
  });
}
