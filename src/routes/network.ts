// Public counts of the network: GET /available_models, /active_node_count, /total_job_count and
// the dashboard's GET /network (its per-model node counts for user and reader keys only); and a
// node's own view for its operator, GET /network/nodes/{name}.
import {
  ActiveNodeCountResponses,
  AvailableModelsResponses,
  NetworkResponses,
  NodeViewParams,
  NodeViewResponses,
  TotalJobCountResponses,
} from '../generated/schemas.js';
import { activeNodeCount, availableModels, jobCounts } from '../jobs/read.js';
import { networkView, nodeView, strangersView } from '../jobs/network.js';
import { nodeStanding, verificationSummary } from '../verify/audit-view.js';
import { HttpError } from '../http/http-error.js';
import { latencySummary } from '../http/metrics.js';
import { authenticateRequest, authorizeNodeRead, requestKey } from './authenticate.js';
import type { App, Deps } from './types.js';

export function networkRoutes(app: App, deps: Deps): void {
  const {
    db,
    options: { coordinator: c, verify },
  } = deps.service;
  app.get('/available_models', { schema: { response: AvailableModelsResponses } }, async () => {
    const details = await availableModels(db, c.onlineWindow, c.modelsTtl);
    return { models: details.map((m) => m.name), details: details.map(({ name, nodes }) => ({ name, nodes })) };
  });
  app.get('/active_node_count', { schema: { response: ActiveNodeCountResponses } }, async () => ({
    active_node_count: await activeNodeCount(db, c.onlineWindow),
  }));
  app.get('/total_job_count', { schema: { response: TotalJobCountResponses } }, async () => {
    const byState = await jobCounts(db);
    return { total_job_count: Object.values(byState).reduce((a, b) => a + b, 0), by_state: byState };
  });
  // Issue 53: the per-model node counts (and who did the recent jobs) only for a user or reader
  // key: a stranger — a node among them — must not learn it serves a model alone.
  app.get('/network', { schema: { response: NetworkResponses } }, async (req) => {
    const key = requestKey(req);
    const principal = key ? await authenticateRequest(deps, req, key) : undefined;
    const view = await networkView(db, c.onlineWindow, c.modelsTtl);
    const known = principal?.kind === 'user' || principal?.kind === 'reader';
    return {
      ...(known ? view : strangersView(view)),
      // Issue 56: this server's time to first token, queue time and output rate (its metrics), per node for the same keys.
      latency: await latencySummary(deps.metrics, known),
      verification: await verificationSummary(db),
    };
  });
  app.get('/network/nodes/:node_name', { schema: { params: NodeViewParams, response: NodeViewResponses } }, async (req) => {
    const { node_name } = req.params;
    await authorizeNodeRead(deps, req, node_name);
    const view = await nodeView(db, node_name, c.onlineWindow, c.modelsTtl);
    const standing = await nodeStanding(db, node_name, verify);
    if (!view || !standing) throw new HttpError(404, 'Node not found');
    return { ...view, ...standing };
  });
}
