// GET /v1/models and /models: the models some online node serves now, as OpenAI's model list
// (GET /v1/models/{model} for one). Completions ask ServedModels, which reads the same at
// most once a second — and again, at once, for a model it has not seen served, so a node that
// just declared one is found (concurrent misses share one read).
import type { Queryable } from '../../db/database.js';
import type { CoordinatorConfig } from '../../config.js';
import { availableModels } from '../../jobs/read.js';
import { OpenAIError } from './errors.js';
import type { OpenAIApp } from './context.js';

const FRESH_MS = 1_000;

export class ServedModels {
  private cached: { at: number; names: Set<string> } | undefined;
  private loading: Promise<Set<string>> | undefined;

  constructor(private readonly db: Queryable, private readonly config: CoordinatorConfig) {}

  async names(freshMs = FRESH_MS): Promise<Set<string>> {
    if (this.cached && performance.now() - this.cached.at < freshMs) return this.cached.names;
    this.loading ??= availableModels(this.db, this.config.onlineWindow, this.config.modelsTtl)
      .then((rows) => {
        const names = new Set(rows.map((r) => r.name));
        this.cached = { at: performance.now(), names };
        return names;
      })
      .finally(() => { this.loading = undefined; });
    return this.loading;
  }

  async has(model: string): Promise<boolean> {
    return (await this.names()).has(model) || (await this.names(0)).has(model);
  }
}

const entry = (id: string) => ({ id, object: 'model', created: 0, owned_by: 'inference-network' });

export function modelRoutes(app: OpenAIApp, served: ServedModels): void {
  const list = async () => ({ object: 'list', data: [...(await served.names())].sort().map(entry) });
  app.get('/v1/models', list);
  app.get('/models', list);
  const one = async (req: { params: unknown }) => {
    const { model } = req.params as { model: string };
    if (!(await served.has(model))) throw new OpenAIError(404, `The model '${model}' does not exist or no node serves it now.`, 'invalid_request_error', 'model', 'model_not_found');
    return entry(model);
  };
  app.get('/v1/models/:model', one);
  app.get('/models/:model', one);
}
