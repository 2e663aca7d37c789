// GET /v1/models and /models: the models some online node serves now, as OpenAI's model list
// (GET /v1/models/{model} for one), each with `capabilities`: what some node serving it can do
// beyond plain chat (jobs/capabilities.ts; docs/openai.md). Completions ask ServedModels, which
// reads the same at most once a second — and again, at once, for a model it has not seen served
// or not with the capabilities a request needs, so a node that just declared one is found
// (concurrent misses share one read).
import type { Queryable } from '../../db/database.js';
import type { CoordinatorConfig } from '../../config.js';
import { availableModels } from '../../jobs/read.js';
import { CAPABILITIES, namesOf } from '../../jobs/capabilities.js';
import { OpenAIError } from './errors.js';
import type { OpenAIApp } from './context.js';

const FRESH_MS = 1_000;

export class ServedModels {
  private cached: { at: number; caps: Map<string, number> } | undefined;
  private loading: Promise<Map<string, number>> | undefined;

  constructor(private readonly db: Queryable, private readonly config: CoordinatorConfig) {}

  /** Served models and what some node can do with each (capability bits). */
  async all(freshMs = FRESH_MS): Promise<Map<string, number>> {
    if (this.cached && performance.now() - this.cached.at < freshMs) return this.cached.caps;
    this.loading ??= availableModels(this.db, this.config.onlineWindow, this.config.modelsTtl)
      .then((rows) => {
        const caps = new Map(rows.map((r) => [r.name, r.caps]));
        this.cached = { at: performance.now(), caps };
        return caps;
      })
      .finally(() => { this.loading = undefined; });
    return this.loading;
  }

  async names(freshMs = FRESH_MS): Promise<Set<string>> {
    return new Set((await this.all(freshMs)).keys());
  }

  async has(model: string): Promise<boolean> {
    return (await this.all()).has(model) || (await this.all(0)).has(model);
  }

  /** The capabilities (bits) of `needs` that no online node serving the model has; 0: some node can do the job. */
  /**
   * Nothing when some online node serves the model now; else OpenAI's 404 `model_not_found`,
   * once `counted` has told the metrics (a job for it would wait for a node that may never come).
   */
  async requireServed(model: string, counted: () => void): Promise<void> {
    if (await this.has(model)) return;
    counted();
    throw new OpenAIError(404, `The model '${model}' does not exist or no node serves it now (GET /v1/models lists those that do).`, 'invalid_request_error', 'model', 'model_not_found');
  }

  async missing(model: string, needs: number): Promise<number> {
    if (needs === 0) return 0;
    const lacks = (caps: Map<string, number>) => needs & ~(caps.get(model) ?? 0);
    return lacks(await this.all()) && lacks(await this.all(0));
  }
}

// `score` is verification's (score checks, verify/scores.ts), nothing a client can ask for: not listed.
const entry = (id: string, caps: number) => ({ id, object: 'model', created: 0, owned_by: 'inference-network', capabilities: ['chat', ...namesOf(caps & ~CAPABILITIES.score)] });

export function modelRoutes(app: OpenAIApp, served: ServedModels): void {
  const list = async () => ({ object: 'list', data: [...(await served.all())].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([id, caps]) => entry(id, caps)) });
  app.get('/v1/models', list);
  app.get('/models', list);
  const one = async (req: { params: unknown }) => {
    const { model } = req.params as { model: string };
    if (!(await served.has(model))) throw new OpenAIError(404, `The model '${model}' does not exist or no node serves it now.`, 'invalid_request_error', 'model', 'model_not_found');
    return entry(model, (await served.all()).get(model) ?? 0);
  };
  app.get('/v1/models/:model', one);
  app.get('/models/:model', one);
}
