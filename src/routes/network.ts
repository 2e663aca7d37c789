// Public counts of the network: GET /available_models, /active_node_count, /total_job_count.
import { ActiveNodeCountResponses, AvailableModelsResponses, TotalJobCountResponses } from '../generated/schemas.js';
import { activeNodeCount, availableModels, jobCounts } from '../jobs/read.js';
import type { App, Deps } from './types.js';

export function networkRoutes(app: App, { db, coordinatorConfig: c }: Deps): void {
  app.get('/available_models', { schema: { response: AvailableModelsResponses } }, async () => {
    const details = await availableModels(db, c.onlineWindow, c.modelsTtl);
    return { models: details.map((m) => m.name), details };
  });
  app.get('/active_node_count', { schema: { response: ActiveNodeCountResponses } }, async () => ({ active_node_count: await activeNodeCount(db, c.onlineWindow) }));
  app.get('/total_job_count', { schema: { response: TotalJobCountResponses } }, async () => {
    const byState = await jobCounts(db);
    return { total_job_count: Object.values(byState).reduce((a, b) => a + b, 0), by_state: byState };
  });
}
