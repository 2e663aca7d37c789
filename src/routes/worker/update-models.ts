// POST /worker/update_models: the models this worker serves now; it is offered only jobs of
// these, until the declaration lapses (MODELS_TTL) unless sent again. `capabilities` (ours,
// `ins worker`): per model, what the node can do beyond plain chat (jobs/capabilities.ts); a
// worker that sends none (the seed's) is offered plain jobs only. `builds` (ours, issue 31): per
// model, the digest and quantisation the node runs (repositories/model-builds.ts); optional too.
// `limits` (ours, issue 53): per model, the context length the node holds (jobs/context.ts);
// optional: a worker that sends none is given any job, and its request errors are not struck.
import { UpdateModelsRequest, UpdateModelsResponses } from '../../generated/schemas.js';
import { ensureModelIdFor, newModelsForNode } from '../../repositories/models.js';
import { bitsOf } from '../../jobs/capabilities.js';
import { MAX_DECLARED_CONTEXT } from '../../jobs/context.js';
import { declareBuilds, type ModelBuild } from '../../repositories/model-builds.js';
import { HttpError } from '../../http/http-error.js';
import { RequestValidationError } from '../../http/validator.js';
import { valueError } from '../../validation/pydantic.js';
import { authenticateSession, SUSPENDED_DETAIL } from '../authenticate.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';

/** New model names one node may bring into being per UTC day (migrations/0029): as a user key may (jobs/submit.ts). */
export const NEW_MODELS_PER_NODE_PER_DAY = 100;
/** Models one node may serve over all its sessions, and name in one declaration. */
export const MODELS_PER_NODE = 1000;

export function updateModelsRoute(app: App, deps: Deps): void {
  const { db, nodes } = deps.service;
  const coordinatorConfig = deps.service.options.coordinator;
  app.post('/worker/update_models', { schema: { body: UpdateModelsRequest, response: UpdateModelsResponses } }, (req) => rideOutage(async () => {
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
    if (models.length > MODELS_PER_NODE) throw new HttpError(400, `${models.length} models named: a node may serve at most ${MODELS_PER_NODE}. Nothing was declared`);
    // A name that can be no model's is left out, not the declaration refused: the seed's worker
    // stops for hours on a 422 here, over one odd entry of its backend's list (an outside probe).
    const ignored = [...new Set(models.filter((m) => !isModelName(m)))];
    const names = [...new Set(models.filter(isModelName))].sort();
    const ids: number[] = [];
    const built = new Map<number, ModelBuild>();
    const caps = declared ? new Map<number, number>() : undefined;
    const contexts = new Map<number, number>();
    // 400, not 429: the seed's worker stops for hours on any other 4xx here. Refused before any
    // is made, so a refused declaration changes nothing (concurrent ones race past by at most their number).
    const { unknown, today, served } = await newModelsForNode(db, names, session.node.id, session.id, coordinatorConfig);
    if (unknown > 0 && today + unknown > NEW_MODELS_PER_NODE_PER_DAY) throw tooManyNames(unknown, today);
    // Names a node's reports brought into being (CREDIT_POLICY=reports takes any model_name) are
    // known, so it is this bound that keeps one node from filling the public model lists.
    if (served > MODELS_PER_NODE) {
      throw new HttpError(400, `with this declaration the node would serve ${served} models over its sessions: a node may serve at most ${MODELS_PER_NODE}. Nothing was declared`);
    }
    for (const name of names) {
      const id = await ensureModelIdFor(db, name, { node: session.node.id }, NEW_MODELS_PER_NODE_PER_DAY);
      if (id === undefined) throw tooManyNames(unknown, today);
      ids.push(id);
      if (caps && Object.hasOwn(declared!, name)) caps.set(id, bitsOf(declared![name] as string[]));
      if (builds.has(name)) built.set(id, builds.get(name)!);
      if (limits.has(name)) contexts.set(id, limits.get(name)!);
    }
    // Sessions are cached with their models (auth/authenticate.ts): a new set is announced.
    const changed = await nodes.declare(session.id, ids, caps, contexts);
    if (changed === undefined) throw new HttpError(401, 'Invalid session token: register the node first');
    await declareBuilds(db, session.id, built);
    return { status: 'success', models: names, expires_in: Math.round(coordinatorConfig.modelsTtl), ...(ignored.length ? { ignored: ignored.slice(0, 10).map((m) => m.slice(0, 300)) } : {}) };
  }));
}

/** A model's name as the network stores it: 1 to 256 characters (openapi.json's model_name; text that cannot be stored is the validator's 422 for any body). */
const isModelName = (m: string): boolean => m.length >= 1 && (m.length <= 256 || [...m].length <= 256);

const tooManyNames = (unknown: number, today: number) => new HttpError(400, `this declaration names ${unknown} models the network does not know, and this node named ${today} new ones today (UTC): a node may name at most ${NEW_MODELS_PER_NODE_PER_DAY} a day. Nothing was declared; declare the models the network knows, or the others after 00:00 UTC`);

/** The declared context lengths by model name (models not declared in `models` are ignored later); 422 when malformed. */
function limitsOf(v: unknown): Map<string, number> {
  const out = new Map<string, number>();
  if (v === undefined) return out;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid(['limits'], 'limits: expected an object of model → {context_length}', v);
  if (Object.keys(v).length > 1000) throw invalid(['limits'], 'limits: at most 1000 models', null);
  for (const [model, l] of Object.entries(v)) {
    if (typeof l !== 'object' || l === null || Array.isArray(l)) throw invalid(['limits', model], 'limits: expected an object with an optional context_length', l);
    const c = (l as Record<string, unknown>).context_length;
    if (c === undefined || c === null) continue;
    if (typeof c !== 'number' || !Number.isInteger(c) || c < 1 || c > MAX_DECLARED_CONTEXT) {
      throw invalid(['limits', model, 'context_length'], `limits: context_length must be an integer from 1 to ${MAX_DECLARED_CONTEXT} (tokens)`, c);
    }
    out.set(model, c);
  }
  return out;
}

const BUILD_FIELDS = { digest: 128, quantization: 32 } as const;

/** FastAPI's 422 (a pydantic value error at `loc`), as the schema's own checks answer. */
const invalid = (loc: (string | number)[], error: string, input: unknown) => new RequestValidationError([valueError(['body', ...loc], error, input)]);

/** The declared builds by model name (models not declared in `models` are ignored later); 422 when malformed. */
function buildsOf(v: unknown): Map<string, ModelBuild> {
  const out = new Map<string, ModelBuild>();
  if (v === undefined) return out;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid(['builds'], 'builds: expected an object of model → {digest, quantization}', v);
  if (Object.keys(v).length > 1000) throw invalid(['builds'], 'builds: at most 1000 models', null);
  for (const [model, b] of Object.entries(v)) {
    if (typeof b !== 'object' || b === null || Array.isArray(b)) throw invalid(['builds', model], 'builds: expected an object with optional digest and quantization', b);
    const build: ModelBuild = {};
    for (const [field, max] of Object.entries(BUILD_FIELDS) as [keyof ModelBuild, number][]) {
      const x = (b as Record<string, unknown>)[field];
      if (x === undefined || x === null) continue;
      // Printable ASCII only: these are identifiers (sha256:…, Q4_K_M), shown as they are on /network.
      if (typeof x !== 'string' || x.length === 0 || x.length > max || !/^[\x21-\x7e]+$/.test(x)) {
        throw invalid(['builds', model, field], `builds: ${field} must be a string of 1 to ${max} printable ASCII characters without spaces`, x);
      }
      build[field] = x;
    }
    if (build.digest !== undefined || build.quantization !== undefined) out.set(model, build);
  }
  return out;
}
