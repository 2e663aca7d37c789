// The worker's side of the coordinator's wire (openapi.json, workers): register with the node
// key, declare models, long-poll get_job, send partial output and the report with the job key,
// deregister; or, on the network's own wire, report and take the next jobs in one call (exchange). A server that cannot be reached (or answers 5xx/429) is tried again with
// exponential backoff and jitter, for ever: the worker resumes by itself once it is back.
import pRetry from 'p-retry';
import { http } from './http.js';
import { ProgressStream, type StreamEvents } from './progress-stream.js';
import type { ChatParams } from './chat-wire.js';
import type { BackendAnswer, ModelBuild } from './backend.js';

export interface Job {
  job_id: string;
  api_key: string;
  model: string;
  messages: { role: string; content: string }[];
  max_output: number;
  temperature: number;
  seed?: number;
  stream?: boolean;
  /** The beginning of the answer an earlier attempt already streamed to the client (its node failed mid-answer): continue it. Absent or non-empty. */
  answer_prefix?: string;
  /** The job's OpenAI parameters (ours, to sessions that declared capabilities; docs/openai.md). */
  params?: ChatParams;
}

/** A job's report: the backend's answer (`content` whole, any answer prefix included), or an error. */
export interface Report extends BackendAnswer {
  status: 'success' | 'error';
  error?: string;
  /** The backend refused the request itself (a 4xx about it): reported as the request's error, not the node's. */
  requestError?: { code: string | null; message: string };
}

/** One report's answer on the network's own wire (openapi.json ReportAnswer): accepted (committed, or a replay) or refused with its detail. */
export interface ReportAnswer {
  job_id: string;
  accepted: boolean;
  status: 'success' | 'error';
  points: number;
  replayed: boolean;
  detail?: string;
}

export interface Exchanged {
  reports: ReportAnswer[];
  jobs: Job[];
}

/** A report as update_result (and each of jobs/next's reports) takes it, with the job key. */
function reportBody(job: Job, r: Report): Record<string, unknown> {
  const result =
    r.status === 'success'
      ? {
          message: { role: 'assistant', content: r.content, ...(r.tool_calls?.length ? { tool_calls: r.tool_calls } : {}) },
          ...(r.logprobs ? { logprobs: { content: r.logprobs } } : {}),
          ...(r.finish_reason ? { finish_reason: r.finish_reason } : {}),
          ...(r.embeddings ? { embeddings: r.embeddings } : {}),
          ...(r.scores ? { scores: r.scores } : {}),
          ...(r.tokens ? { tokens: r.tokens } : {}),
        }
      : r.requestError
        ? // The shape the coordinator reads as the request's own error (jobs/answer.ts requestErrorOf).
          { message: r.requestError.message, error: { type: 'invalid_request_error', code: r.requestError.code, message: r.requestError.message } }
        : { message: '', error: r.error ?? 'backend error' };
  return {
    job_id: job.job_id,
    api_key: job.api_key,
    model_name: job.model,
    result,
    status: r.status,
    ...(r.usage ? { usage: r.usage } : {}),
  };
}

/** An answer the worker must act on (not retried): 401 (register again), 400 (the lease ended), others. */
export class CoordinatorError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string,
  ) {
    super(`HTTP ${status}: ${detail}`);
  }
}

export interface ClientEvents {
  retrying: (what: string, attempt: number, reason: string) => void;
}

export class CoordinatorClient {
  token = '';
  /** False once the coordinator answered that it has no progress streams (an older one): progress then goes piece by piece. */
  streams = true;

  /** retryMaxMs: the longest pause between tries while the server is away (--retry-max). */
  constructor(
    private readonly server: string,
    private readonly node: string,
    private readonly key: string,
    private readonly events: ClientEvents,
    private readonly stopped: AbortSignal,
    private readonly retryMaxMs = 30_000,
  ) {}

  /**
   * One call, retried while the server is unreachable, overloaded or failing (5xx, 429).
   * `stoppable`: the worker's stop ends it at once, in a pause or mid-try (p-retry's `signal`
   * rejects without waiting for the try) — for calls whose answer is of no use once stopping
   * (a poll, a declaration, a registration: one answered just as the stop came leaves a session
   * until it goes stale). A report is never cut: its try runs to its end.
   */
  private async call<T>(
    what: string,
    method: 'GET' | 'POST',
    path: string,
    opts: { body?: unknown; auth?: string; signal?: AbortSignal; retry?: boolean; stoppable?: boolean } = {},
  ): Promise<T> {
    const attempt = async (): Promise<T> => {
      const headers: Record<string, string> = {};
      if (opts.body !== undefined) headers['content-type'] = 'application/json';
      if (opts.auth) headers.authorization = `Bearer ${opts.auth}`;
      const res = await http(`${this.server}${path}`, {
        method,
        headers,
        signal: opts.signal,
        ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}),
      });
      const text = await res.text();
      if (res.status < 300) return JSON.parse(text) as T;
      const detail = (() => {
        try {
          const d = (JSON.parse(text) as { detail?: unknown }).detail;
          return typeof d === 'string' ? d : JSON.stringify(d ?? text);
        } catch {
          return text;
        }
      })();
      throw new CoordinatorError(res.status, detail.slice(0, 300));
    };
    if (opts.retry === false) return attempt();
    const retried = (err: Error) =>
      !this.stopped.aborted && !opts.signal?.aborted && (!(err instanceof CoordinatorError) || err.status >= 500 || err.status === 429);
    return pRetry(attempt, {
      forever: true,
      minTimeout: Math.min(500, this.retryMaxMs),
      maxTimeout: this.retryMaxMs,
      factor: 2,
      randomize: true,
      // A worker told to stop while the server is away stops at once, not after its next pause
      // (up to --retry-max): the call rejects with the stop's AbortError.
      ...(opts.stoppable ? { signal: this.stopped } : {}),
      shouldRetry: retried,
      // p-retry calls this for an error it does not retry too (a poll aborted by the stop, a
      // 4xx): only a retried one is worth the operator's "retrying".
      onFailedAttempt: (err) => {
        if (retried(err)) this.events.retrying(what, err.attemptNumber, err.message);
      },
    });
  }

  async register(capacity: number): Promise<void> {
    const r = await this.call<{ access_token: string }>('register_node', 'POST', '/worker/register_node', {
      auth: this.key,
      body: { node_url: this.node, node_version: `ins-worker`, stats: {}, capacity },
      stoppable: true,
    }).catch((err: unknown) => {
      // A coordinator always has the path: a 404 is another server at that URL.
      if (err instanceof CoordinatorError && err.status === 404) {
        throw new CoordinatorError(
          404,
          `${err.detail.slice(0, 100)} (${this.server} has no /worker/register_node: is --server this network's coordinator, without a path?)`,
        );
      }
      throw err;
    });
    this.token = r.access_token;
  }

  /** capabilities: per model, what the backend can do beyond plain chat (jobs/capabilities.ts names); builds: what it runs (issue 31), sent when known; contexts: the context length of each (issue 53, update_models `limits`), sent when known. */
  async declare(
    models: string[],
    capabilities: Record<string, string[]> = {},
    builds: Record<string, ModelBuild> = {},
    contexts: Record<string, number> = {},
  ): Promise<number> {
    const limits = Object.fromEntries(Object.entries(contexts).map(([m, n]) => [m, { context_length: n }]));
    const body = {
      node_url: this.node,
      models,
      capabilities,
      ...(Object.keys(builds).length ? { builds } : {}),
      ...(Object.keys(limits).length ? { limits } : {}),
    };
    const r = await this.call<{ expires_in: number }>('update_models', 'POST', '/worker/update_models', { auth: this.token, body, stoppable: true });
    return r.expires_in;
  }

  async nextJob(wait: number, signal: AbortSignal): Promise<Job | null> {
    const r = await this.call<{ job_data: Job | null }>('get_job', 'GET', `/worker/get_job?node_version=ins-worker&wait=${wait}`, {
      auth: this.token,
      signal,
      stoppable: true,
    });
    return r.job_data;
  }

  /** The job's report with its job key; resolves with the points credited, or throws CoordinatorError (400: the lease ended). */
  async report(job: Job, r: Report): Promise<number> {
    return (await this.call<{ points: number }>('update_result', 'POST', '/worker/update_result', { body: reportBody(job, r) })).points;
  }

  /**
   * The network's own wire (POST /worker/jobs/next): these reports, then up to maxJobs leases,
   * waiting up to `wait` seconds for the first, in one round trip. Throws CoordinatorError for a
   * call refused whole (400: a report update_result would refuse before its lease; 401: the
   * session ended), which recorded and leased nothing. Retried while the server is away (a
   * report is idempotent: a repeat is a replay); the signal ends it.
   */
  async exchange(reports: readonly { job: Job; report: Report }[], maxJobs: number, wait: number, signal?: AbortSignal): Promise<Exchanged> {
    const body = { reports: reports.map((r) => reportBody(r.job, r.report)), max_jobs: maxJobs, ...(wait > 0 ? { wait } : {}) };
    return this.call<Exchanged>('jobs/next', 'POST', '/worker/jobs/next', { auth: this.token, body, signal });
  }

  /**
   * Partial output, or "" as a heartbeat; not retried (the report carries the whole answer).
   * Throws CoordinatorError 400 once the lease has ended (canceled, expired, finished elsewhere).
   */
  async progress(job: Job, delta: string, signal?: AbortSignal): Promise<void> {
    await this.call('job_progress', 'POST', '/worker/job_progress', {
      body: { job_id: job.job_id, api_key: job.api_key, delta },
      retry: false,
      signal,
    });
  }

  /** A job's progress over one request (POST /worker/job_progress_stream), opened with its first piece ("" for none). */
  progressStream(job: Job, delta: string, events: StreamEvents): ProgressStream {
    return new ProgressStream(`${this.server}/worker/job_progress_stream`, job.job_id, job.api_key, delta, events);
  }

  async deregister(): Promise<void> {
    await this.call('deregister_node', 'POST', '/worker/deregister_node', { auth: this.token, body: { node_url: this.node }, retry: false });
  }

  /** The node's standing in verification (GET /network/nodes/{name}: docs/verification.md), read with its key. */
  async standing(): Promise<string> {
    const res = await http(`${this.server}/network/nodes/${encodeURIComponent(this.node)}`, { headers: { api_key: this.key } });
    if (res.status >= 300) throw new CoordinatorError(res.status, 'network/nodes');
    return ((await res.json()) as { standing: string }).standing;
  }

  /** Today's points (UTC), for the status line. */
  async pointsToday(): Promise<number> {
    const res = await http(`${this.server}/daily_points`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', api_key: this.key },
      body: JSON.stringify({ node_name: this.node, last_days: 1 }),
    });
    if (res.status >= 300) throw new CoordinatorError(res.status, 'daily_points');
    return ((await res.json()) as { points: number }[])[0]?.points ?? 0;
  }
}
