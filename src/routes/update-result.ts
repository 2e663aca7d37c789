// POST /worker/update_result: a worker reports a job's result, its key in the body's api_key.
// - A job key (jk_, from get_job) ends that lease: the coordinator finishes or requeues the
//   job and credits a success once (jobs/complete.ts). A lease that ended is refused with
//   400, which keeps honest workers polling (any other 4xx stops the real worker for hours).
// - A node key reporting a dispatched job that is leased to its node does the same.
// - A node key reporting any other job id records it under CREDIT_POLICY=reports (the
//   original contract, results/recorder.ts) and is refused under CREDIT_POLICY=dispatched.
// - Issue 53: a success's `result.tokens` (the answer's tokens as the node generated them,
//   validation/answer-tokens.ts) are taken out of the result: checked against the answer's text
//   (400, nothing recorded, when they do not spell it, or come with tool calls), then kept in
//   jobs.tokens for score checks only, never in what the owner reads or job_results keeps.
import type { FastifyRequest } from 'fastify';
import { UpdateResultRequest, UpdateResultResponses } from '../generated/schemas.js';
import { hashKey, isWellFormedKey, keyKind } from '../keys.js';
import { jobIdSpelled } from '../jobs/read.js';
import { jobReportOf, storableReport } from './job-report.js';
import type { Completion } from '../jobs/complete.js';
import type { NodeRow } from '../auth/principal.js';
import { rideOutage } from '../db/outage.js';
import { authenticateRequest, SUSPENDED_DETAIL } from './authenticate.js';
import { HttpError } from '../http/http-error.js';
import type { App, Deps } from './types.js';

type Body = UpdateResultRequest;
interface Reply {
  job_id: string;
  status: 'success' | 'error';
  points: number;
  replayed: boolean;
}

export function updateResultRoute(app: App, deps: Deps): void {
  const { metrics, limiters } = deps;
  const {
    results,
    coordinator,
    options: { defaultPointsPerJob, coordinator: coordinatorConfig },
  } = deps.service;

  async function completeLease(body: Body, keyHash: string): Promise<Reply> {
    const c: Completion = await coordinator.complete(jobReportOf(body, keyHash));
    metrics.results.inc({ status: body.status, outcome: c.kind === 'completed' ? 'recorded' : c.kind === 'replayed' ? 'replayed' : 'refused' });
    if (c.kind === 'refused') throw new HttpError(400, c.detail);
    const points = c.kind === 'completed' ? c.points : 0;
    if (points > 0) metrics.points.inc(points);
    return { job_id: body.job_id, status: c.status, points, replayed: c.kind === 'replayed' };
  }

  async function nodeReport(req: FastifyRequest, body: Body, node: NodeRow): Promise<Reply> {
    // A dispatched job id: the node's own lease of it, or nobody's business of this node.
    const jobId = jobIdSpelled(body.job_id);
    const lease = jobId === undefined ? undefined : await coordinator.nodeLeaseOf(jobId, node.id);
    if (lease) return completeLease(body, lease);
    if (lease === null) {
      throw new HttpError(
        coordinatorConfig.creditPolicy === 'dispatched' ? 403 : 409,
        `Job ${body.job_id} is a job of this network that was never leased to this node`,
      );
    }
    if (coordinatorConfig.creditPolicy === 'dispatched') {
      throw new HttpError(
        403,
        'CREDIT_POLICY=dispatched: only jobs leased to this node earn points; report with the job key (jk_) that came with the job',
      );
    }
    // A UUID spelt otherwise than a recorded one (capitals, no hyphens, braces) is that job, also
    // once retention has deleted its jobs row: one job, one credit. Other ids are recorded as sent.
    // (Its result is kept as sent, `tokens` too if any: the original contract's; no score check reads an undispatched job.)
    const recordAs = jobId !== undefined && jobId !== body.job_id && (await results.has(jobId)) ? jobId : body.job_id;
    const outcome = await results.record({
      nodeId: node.id,
      jobId: recordAs,
      modelName: body.model_name,
      status: body.status,
      result: body.result,
      defaultPoints: defaultPointsPerJob,
    });
    metrics.results.inc({ status: body.status, outcome: outcome.kind });
    if (outcome.kind === 'conflict') throw new HttpError(409, outcome.detail);
    const points = outcome.kind === 'recorded' ? outcome.points : 0;
    if (points > 0) metrics.points.inc(points);
    req.log.debug({ job: body.job_id }, 'recorded a node-key report');
    return { job_id: body.job_id, status: outcome.status, points, replayed: outcome.kind === 'replayed' };
  }

  app.post(
    '/worker/update_result',
    {
      schema: { body: UpdateResultRequest, response: UpdateResultResponses },
      ...(limiters.reports ? { preHandler: limiters.reports } : {}),
      // A job key's report of an answer with a NUL or an unpaired surrogate (a model's odd output)
      // keeps it with U+FFFD in their place, rather than a 422 that stops the seed's worker for
      // hours and leaves the job to its lease's end. (A node key's report keeps the original
      // contract's 422: docs/api.md.)
      // A key with such a character is no key (401, or 400 for a jk_ one), as FastAPI finds it,
      // rather than a 422 about storing it: a key is only ever hashed.
      preValidation: (req, _reply, done) => {
        const body = req.body as Record<string, unknown> | null;
        if (typeof body === 'object' && body !== null) storableReport(body);
        done();
      },
    },
    async (req) => {
      const body = req.body;
      if (keyKind(body.api_key) === 'job') {
        // Only a key the service could have issued joins a batch of reports (the batched statement
        // itself is the rest of the check: a report matches only its own open lease).
        if (!isWellFormedKey(body.api_key)) throw new HttpError(400, 'Unknown job key');
        // A short database outage is ridden out here: a 5xx stops the real worker for hours.
        return rideOutage(() => completeLease(body, hashKey(body.api_key)));
      }
      // A node key's report rides out a short outage too: the seed's worker stops for hours on a 5xx.
      return rideOutage(async () => {
        const principal = await authenticateRequest(deps, req, body.api_key);
        if (principal.kind !== 'node') throw new HttpError(403, 'This key cannot report results');
        req.nodeName = principal.node.name;
        if (principal.node.disabled) throw new HttpError(403, 'Node is disabled');
        if (principal.node.suspended) throw new HttpError(403, SUSPENDED_DETAIL);
        return nodeReport(req, body, principal.node);
      });
    },
  );
}
