// POST /worker/update_models: the models this worker serves now; it is offered only jobs of
// these, until the declaration lapses (MODELS_TTL) unless sent again. `capabilities` (ours,
// `ins worker`): per model, what the node can do beyond plain chat (jobs/capabilities.ts); a
// worker that sends none (the seed's) is offered plain jobs only. `builds` (ours, issue 31): per
// model, the digest and quantisation the node runs (nodes/sql/declare.ts); optional too.
// `limits` (ours, issue 53): per model, the context length the node holds (jobs/context.ts);
// optional: a worker that sends none is given any job, and its request errors are not struck.
import { UpdateModelsRequest, UpdateModelsResponses } from '../../generated/schemas.js';
import { bitsOf } from '../../jobs/capabilities.js';
import { MAX_DECLARED_CONTEXT } from '../../jobs/context.js';
import type { ModelBuild } from '../../nodes/declaration.js';
import { DeclarationRefused } from '../../nodes/declaration.js';
import { HttpError } from '../../http/http-error.js';
import { RequestValidationError } from '../../http/validator.js';
import { valueError } from '../../validation/pydantic.js';
import { authenticateSession, SUSPENDED_DETAIL } from '../authenticate.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';

export { MODELS_PER_NODE, NEW_MODELS_PER_NODE_PER_DAY } from '../../nodes/declaration.js';

export function updateModelsRoute(app: App, deps: Deps): void {
  const { nodes } = deps.service;
  const coordinatorConfig = deps.service.options.coordinator;
  app.post('/worker/update_models', { schema: { body: UpdateModelsRequest, response: UpdateModelsResponses } }, (req) =>
    rideOutage(async () => {
      const session = await authenticateSession(deps, req);
      const { node_url, models } = req.body;
      const declared = req.body.capabilities as Record<string, unknown> | undefined;
      for (const [model, list] of Object.entries(declared ?? {})) {
        if (!Array.isArray(list) || list.length > 16 || !list.every((c) => typeof c === 'string' && c.length <= 32)) {
          throw invalid(['capabilities', model], 'capabilities: expected an array of at most 16 capability names of at most 32 characters', list);
        }
      }
      const builds = buildsOf(req.body.builds);
      const limits = limitsOf(req.body.limits);
      if (node_url !== undefined && node_url !== session.node.name) throw new HttpError(400, `node_url "${node_url}" is not this session's node`);
      if (session.node.suspended) throw new HttpError(403, SUSPENDED_DETAIL);
      const caps = declared ? new Map(Object.entries(declared).map(([m, list]) => [m, bitsOf(list as string[])])) : undefined;
      let out;
      try {
        out = await nodes.declareModels({ id: session.id, nodeId: session.node.id }, { models, caps, builds, contexts: limits }, coordinatorConfig);
      } catch (err) {
        // 400, not 429: the seed's worker stops for hours on any other 4xx here.
        if (err instanceof DeclarationRefused) throw new HttpError(400, err.message);
        throw err;
      }
      if (!out) throw new HttpError(401, 'Invalid session token: register the node first');
      const { names, ignored } = out;
      return {
        status: 'success',
        models: names,
        expires_in: Math.round(coordinatorConfig.modelsTtl),
        ...(ignored.length ? { ignored: ignored.slice(0, 10).map((m) => m.slice(0, 300)) } : {}),
      };
    }),
  );
}

/**
 * An object of model name → object (`limits`, `builds`: models not declared in `models` are
 * ignored later), each entry read by `each` (undefined: nothing declared for it); 422 when
 * malformed, with `shape` saying what was expected.
 */
function perModel<T>(
  field: string,
  v: unknown,
  shape: { whole: string; entry: string },
  each: (model: string, entry: Record<string, unknown>) => T | undefined,
): Map<string, T> {
  const out = new Map<string, T>();
  if (v === undefined) return out;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid([field], `${field}: expected an object of ${shape.whole}`, v);
  if (Object.keys(v).length > 1000) throw invalid([field], `${field}: at most 1000 models`, null);
  for (const [model, e] of Object.entries(v)) {
    if (typeof e !== 'object' || e === null || Array.isArray(e)) throw invalid([field, model], `${field}: expected an object with ${shape.entry}`, e);
    const got = each(model, e as Record<string, unknown>);
    if (got !== undefined) out.set(model, got);
  }
  return out;
}

/** The declared context lengths by model name; 422 when malformed. */
const limitsOf = (v: unknown): Map<string, number> =>
  perModel('limits', v, { whole: 'model → {context_length}', entry: 'an optional context_length' }, (model, l) => {
    const c = l.context_length;
    if (c === undefined || c === null) return undefined;
    if (typeof c !== 'number' || !Number.isInteger(c) || c < 1 || c > MAX_DECLARED_CONTEXT) {
      throw invalid(['limits', model, 'context_length'], `limits: context_length must be an integer from 1 to ${MAX_DECLARED_CONTEXT} (tokens)`, c);
    }
    return c;
  });

const BUILD_FIELDS = { digest: 128, quantization: 32 } as const;

/** FastAPI's 422 (a pydantic value error at `loc`), as the schema's own checks answer. */
const invalid = (loc: (string | number)[], error: string, input: unknown) => new RequestValidationError([valueError(['body', ...loc], error, input)]);

/** The declared builds by model name; 422 when malformed. */
const buildsOf = (v: unknown): Map<string, ModelBuild> =>
  perModel('builds', v, { whole: 'model → {digest, quantization}', entry: 'optional digest and quantization' }, (model, b) => {
    const build: ModelBuild = {};
    for (const [field, max] of Object.entries(BUILD_FIELDS) as [keyof ModelBuild, number][]) {
      const x = b[field];
      if (x === undefined || x === null) continue;
      // Printable ASCII only: these are identifiers (sha256:…, Q4_K_M), shown as they are on /network.
      if (typeof x !== 'string' || x.length === 0 || x.length > max || !/^[\x21-\x7e]+$/.test(x)) {
        throw invalid(['builds', model, field], `builds: ${field} must be a string of 1 to ${max} printable ASCII characters without spaces`, x);
      }
      build[field] = x;
    }
    return build.digest !== undefined || build.quantization !== undefined ? build : undefined;
  });
