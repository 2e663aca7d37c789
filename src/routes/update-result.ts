// POST /worker/update_result: a worker reports a job's result with its node key in the body.
import { UpdateResultRequest, UpdateResultResponses } from '../generated/schemas.js';
import { authenticateRequest } from './authenticate.js';
import { HttpError } from '../http/http-error.js';
import type { App, Deps } from './types.js';

export function updateResultRoute(app: App, deps: Deps): void {
  const { results, metrics, defaultPointsPerJob, limiters } = deps;
  app.post('/worker/update_result', {
    schema: {
      body: UpdateResultRequest,
      response: UpdateResultResponses,
    },
    ...(limiters.reports ? { preHandler: limiters.reports } : {}),
  }, async (req) => {
    const { job_id, api_key, model_name, result, status } = req.body;
    const principal = await authenticateRequest(deps, req, api_key);
    if (principal.kind !== 'node') throw new HttpError(403, 'This key cannot report results');
    req.nodeName = principal.node.name;
    if (principal.node.disabled) throw new HttpError(403, 'Node is disabled');

    const outcome = await results.record({
      nodeId: principal.node.id,
      jobId: job_id,
      modelName: model_name,
      status,
      result,
      defaultPoints: defaultPointsPerJob,
    });
    metrics.results.inc({ status, outcome: outcome.kind });
    if (outcome.kind === 'conflict') throw new HttpError(409, outcome.detail);
    const points = outcome.kind === 'recorded' ? outcome.points : 0;
    if (points > 0) metrics.points.inc(points);
    return { job_id, status: outcome.status, points, replayed: outcome.kind === 'replayed' };
  });
}
