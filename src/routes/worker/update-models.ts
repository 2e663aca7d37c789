// POST /worker/update_models: the models this worker serves now; it is offered only jobs of
// these, until the declaration lapses (MODELS_TTL) unless sent again. `capabilities` (ours,
// `ins worker`): per model, what the node can do beyond plain chat (jobs/capabilities.ts); a
// worker that sends none (the seed's) is offered plain jobs only.
import { UpdateModelsRequest, UpdateModelsResponses } from '../../generated/schemas.js';
import { ensureModelId } from '../../repositories/models.js';
import { bitsOf } from '../../jobs/capabilities.js';
import { HttpError } from '../../http/http-error.js';
import { authenticateSession, SUSPENDED_DETAIL } from '../authenticate.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';

export function updateModelsRoute(app: App, deps: Deps): void {
  const { db, nodes } = deps.service;
  const coordinatorConfig = deps.service.options.coordinator;
  app.post('/worker/update_models', { schema: { body: UpdateModelsRequest, response: UpdateModelsResponses } }, (req) => rideOutage(async () => {
    const session = await authenticateSession(deps, req);
    const { node_url, models } = req.body;
    const declared = req.body.capabilities as Record<string, unknown> | undefined;
    for (const [model, list] of Object.entries(declared ?? {})) {
      if (!Array.isArray(list) || list.length > 16 || !list.every((c) => typeof c === 'string' && c.length <= 32)) {
        throw new HttpError(422, `capabilities["${model.slice(0, 64)}"]: expected an array of at most 16 capability names`);
      }
    }
    if (node_url !== undefined && node_url !== session.node.name) throw new HttpError(400, `node_url "${node_url}" is not this session's node`);
    if (session.node.suspended) throw new HttpError(403, SUSPENDED_DETAIL);
    const names = [...new Set(models)].sort();
    const ids: number[] = [];
    const caps = declared ? new Map<number, number>() : undefined;
    for (const name of names) {
      const id = await ensureModelId(db, name);
      ids.push(id);
      if (caps && Object.hasOwn(declared!, name)) caps.set(id, bitsOf(declared![name] as string[]));
    }
    // Sessions are cached with their models (auth/authenticate.ts): a new set is announced.
    const changed = await nodes.declare(session.id, ids, caps);
    if (changed === undefined) throw new HttpError(401, 'Invalid session token: register the node first');
    return { status: 'success', models: names, expires_in: Math.round(coordinatorConfig.modelsTtl) };
  }));
}
