// GET /v1/models and /models: the models some online node serves now, as OpenAI's model list
// (GET /v1/models/{model} for one), each with `capabilities`: what some node serving it can do
// beyond plain chat (jobs/capabilities.ts; docs/openai.md). Completions ask ServedModels, which
// reads the same at most once a second — and again, at once, for a model it has not seen served
// or not with the capabilities a request needs, so a node that just declared one is found
// (concurrent misses share one read). A model whose nodes serve it as an embedding model alone
// (jobs/capabilities.ts chatsSql) is listed without `chat`, and a chat completion for it is
// refused with OpenAI's 404 for "not a chat model" rather than queued for a node that would
// answer the job with its backend's error.
import type { Queryable } from '../../db/database.js';
import type { CoordinatorConfig } from '../../config.js';
import { availableModels } from '../../jobs/read.js';
import { CAPABILITIES, namesOf } from '../../jobs/capabilities.js';
import { OpenAIError } from './errors.js';
import type { OpenAIApp } from './context.js';

const FRESH_MS = 1_000;

/** The served models: what some node can do with each (capability bits), and those some node answers chat for (all but embedding models). */
interface Served {
  at: number;
  caps: Map<string, number>;
  chat: Set<string>;
  combos: Map<string, number[]>;
}

export class ServedModels {
  private cached: Served | undefined;
  private loading: Promise<Served> | undefined;

  constructor(
    private readonly db: Queryable,
    private readonly config: CoordinatorConfig,
  ) {}

  /** The served models, read at most once in `freshMs`: one snapshot, so a list and its capabilities agree. */
  async now(freshMs = FRESH_MS): Promise<Served> {
    if (this.cached && performance.now() - this.cached.at < freshMs) return this.cached;
    this.loading ??= availableModels(this.db, this.config.onlineWindow, this.config.modelsTtl)
      .then((rows) => {
        this.cached = {
          at: performance.now(),
          caps: new Map(rows.map((r) => [r.name, r.caps])),
          chat: new Set(rows.filter((r) => r.chat).map((r) => r.name)),
          combos: new Map(rows.map((r) => [r.name, r.combos.map(Number)])),
        };
        return this.cached;
      })
      .finally(() => {
        this.loading = undefined;
      });
    return this.loading;
  }

  /** Whether `holds` of the served models, read again at once when it does not: a node that just declared is found. */
  private async eventually(holds: (s: Served) => boolean): Promise<boolean> {
    return holds(await this.now()) || holds(await this.now(0));
  }

  async has(model: string): Promise<boolean> {
    return this.eventually((s) => s.caps.has(model));
  }

  /**
   * Nothing when some online node serves the model now; else OpenAI's 404 `model_not_found`,
   * once `counted` has told the metrics (a job for it would wait for a node that may never come).
   */
  async requireServed(model: string, counted: () => void): Promise<void> {
    if (await this.has(model)) return;
    counted();
    throw new OpenAIError(
      404,
      `The model '${model}' does not exist or no node serves it now (GET /v1/models lists those that do).`,
      'invalid_request_error',
      'model',
      'model_not_found',
    );
  }

  /**
   * Nothing when some online node serving the model answers chat; else OpenAI's 404 for a model
   * that is not a chat model, once `counted` has told the metrics.
   */
  async requireChat(model: string, counted: () => void): Promise<void> {
    if (await this.eventually((s) => s.chat.has(model))) return;
    counted();
    throw new OpenAIError(
      404,
      `The model '${model}' is an embedding model: no node serving it answers chat (POST /v1/embeddings takes it; GET /v1/models lists each model's capabilities).`,
      'invalid_request_error',
      'model',
      'model_not_chat',
    );
  }

  /** The capabilities (bits) of `needs` that no online node serving the model has; 0: some node has each. */
  async missing(model: string, needs: number): Promise<number> {
    if (needs === 0) return 0;
    const lacks = (s: Served) => needs & ~(s.caps.get(model) ?? 0);
    return lacks(await this.now()) && lacks(await this.now(0));
  }

  /**
   * Nothing when one online node serving the model has all of `needs` (each of which some node
   * has: missing() said so); else OpenAI's 400 `unsupported_parameter` naming `param`, once
   * `counted` has told the metrics. A job goes to one node: one with tools beside another with
   * json serves neither tools-with-json request, which would wait for its deadline.
   */
  async requireTogether(model: string, needs: number, param: string, counted: () => void): Promise<void> {
    const one = (s: Served) => (s.combos.get(model) ?? []).some((c) => (needs & ~c) === 0);
    if (needs === 0 || one(await this.now()) || one(await this.now(0))) return;
    counted();
    throw new OpenAIError(
      400,
      `Unsupported parameter: '${param}' with the rest of this request needs the capabilities ${namesOf(needs)
        .map((n) => `'${n}'`)
        .join(', ')} on one node, and no node serving '${model}' has them all now (GET /v1/models lists what some node of each model can do).`,
      'invalid_request_error',
      param,
      'unsupported_parameter',
    );
  }
}

// `score` is verification's (score checks, verify/scores.ts), nothing a client can ask for: not listed.
const entry = (id: string, caps: number, chat: boolean) => ({
  id,
  object: 'model',
  created: 0,
  owned_by: 'inference-network',
  capabilities: [...(chat ? ['chat'] : []), ...namesOf(caps & ~CAPABILITIES.score)],
});

export function modelRoutes(app: OpenAIApp, served: ServedModels): void {
  const list = async () => {
    const s = await served.now();
    return {
      object: 'list',
      data: [...s.caps].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([id, caps]) => entry(id, caps, s.chat.has(id))),
    };
  };
  app.get('/v1/models', list);
  app.get('/models', list);
  // The rest of the path is the model's name: names with a `/` (`org/name`, `hf.co/org/name:tag`)
  // are found whether a client escapes it (%2F) or not.
  const one = async (req: { params: unknown }) => {
    const model = (req.params as { '*': string })['*'];
    if (!(await served.has(model)))
      throw new OpenAIError(
        404,
        `The model '${model}' does not exist or no node serves it now.`,
        'invalid_request_error',
        'model',
        'model_not_found',
      );
    const s = await served.now();
    return entry(model, s.caps.get(model) ?? 0, s.chat.has(model));
  };
  app.get('/v1/models/*', one);
  app.get('/models/*', one);
}
