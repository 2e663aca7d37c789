// The coordinator's whole cycle over HTTP, as the dispatch scenario drives it (bench/dispatch.ts,
// bench/polls.ts): W workers register with their node keys, declare a model and long-poll
// get_job, reporting each job with its job key; S clients get jobs done one at a time — by
// submit_job and get_result with `wait`, by polling get_result, or by one OpenAI completion.
// Jobs are at temperature 0 with prompts of their own, answered with about 50 words that depend
// on the prompt (as honest nodes would).
import { Pool } from 'undici';
import { percentile } from './common.js';

export const MODEL = 'bench-dispatch:latest';
const now = (): number => performance.now();

export interface Http {
  pool: Pool;
  json: <T>(method: 'GET' | 'POST', path: string, headers?: Record<string, string>, body?: unknown) => Promise<{ status: number; body: T }>;
}

export function http(url: string, connections: number): Http {
  const pool = new Pool(url, { connections, pipelining: 1, keepAliveTimeout: 60_000 });
  return {
    pool,
    async json<T>(method: 'GET' | 'POST', p: string, headers: Record<string, string> = {}, body?: unknown) {
      const res = await pool.request({
        method,
        path: p,
        headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.statusCode, body: (await res.body.json()) as T };
    },
  };
}

interface JobData {
  job_id: string;
  api_key: string;
  model: string;
  messages: { content: string }[];
}

const WORDS =
  'the a of to in is that it for on light water river stone city night garden market bridge paper clock salt honey ocean bread quiet bright ancient small gentle distant golden narrow runs falls turns holds keeps'.split(
    ' ',
  );
/** About 50 words that depend only on the prompt: what an honest node at temperature 0 answers. */
function answerTo(prompt: string): string {
  let h = 2166136261;
  const out: string[] = [];
  for (let i = 0; i < 50; i++) {
    for (const c of `${i}${prompt}`) h = Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0;
    out.push(WORDS[h % WORDS.length]!);
  }
  return out.join(' ');
}
let prompts = 0;
const nextPrompt = () => `bench prompt ${++prompts}: tell me something about ${prompts * 7}`;

export interface CycleRun {
  jobsPerSecond: number;
  submitToLease: { p50: number; p99: number };
  submitToResult: { p50: number; p99: number };
  submitted: number;
  completed: number;
  lost: number;
  duplicated: number;
  dbCheck: string;
}

/**
 * How a client gets a job done: submit_job + get_result with `wait` (jobs), submit_job + get_result
 * every 20 ms until it is not 404 (poll: the seed system's clients, faster), or one OpenAI chat
 * completion (openai).
 */
export type ClientMode = 'jobs' | 'poll' | 'openai';
/**
 * How the workers speak: the seed's wire (get_job with `wait`, then update_result, per job), or
 * `ins worker`'s own (POST /worker/jobs/next: the reports of the jobs it holds and its ask for up to
 * `maxJobs` more in one call, registered with twice that capacity as `ins worker` registers).
 */
export type Wire = { kind: 'seed' } | { kind: 'ins'; maxJobs: number };
export const POLL_EVERY_MS = 20;

/** W workers and S clients for warmup + duration seconds; then the clients stop and the workers drain the queue. */
export async function cycle(
  h: Http,
  workers: { key: string; name: string }[],
  userKey: string,
  submitters: number,
  warmup: number,
  duration: number,
  mode: ClientMode = 'jobs',
  wire: Wire = { kind: 'seed' },
): Promise<CycleRun> {
  const submittedAt = new Map<string, number>();
  const leasedAt = new Map<string, number>();
  const reported = new Map<string, number>();
  const toLease: number[] = [];
  const toResult: number[] = [];
  let completedInWindow = 0;
  let stopSubmitting = false;
  let stopWorkers = false;
  const start = now();
  const windowStart = start + warmup * 1000;
  const windowEnd = windowStart + duration * 1000;

  const tokens = await Promise.all(
    workers.map(async (w) => {
      const reg = await h.json<{ access_token: string }>(
        'POST',
        '/worker/register_node',
        { authorization: `Bearer ${w.key}` },
        { node_url: w.name, node_version: 'bench', stats: {}, ...(wire.kind === 'ins' ? { capacity: 2 * wire.maxJobs } : {}) },
      );
      if (reg.status !== 200) throw new Error(`register_node ${reg.status}`);
      const auth = { authorization: `Bearer ${reg.body.access_token}` };
      const upd = await h.json('POST', '/worker/update_models', auth, { node_url: w.name, models: [MODEL] });
      if (upd.status !== 200) throw new Error(`update_models ${upd.status}`);
      return auth;
    }),
  );

  const worker = async (auth: Record<string, string>) => {
    while (!stopWorkers) {
      const res = await h.json<{ job_data: JobData | null }>('GET', '/worker/get_job?node_version=bench&wait=2', auth);
      const job = res.body.job_data;
      if (!job) continue;
      const t = now();
      if (!leasedAt.has(job.job_id)) leasedAt.set(job.job_id, t);
      const r = await h.json<{ replayed: boolean }>(
        'POST',
        '/worker/update_result',
        {},
        {
          job_id: job.job_id,
          api_key: job.api_key,
          model_name: job.model,
          result: { message: { role: 'assistant', content: answerTo(job.messages.at(-1)?.content ?? '') } },
          status: 'success',
        },
      );
      if (r.status === 200 && !r.body.replayed) reported.set(job.job_id, (reported.get(job.job_id) ?? 0) + 1);
    }
  };

  // `ins worker`'s wire: each call reports every job the worker holds (answered at once, as the
  // other workers do) and asks for up to maxJobs more; the last call reports only.
  const insWorker = async (auth: Record<string, string>, maxJobs: number) => {
    let held: JobData[] = [];
    for (let last = false; !last; ) {
      last = stopWorkers;
      const reports = held.map((job) => ({
        job_id: job.job_id,
        api_key: job.api_key,
        model_name: job.model,
        result: { message: { role: 'assistant', content: answerTo(job.messages.at(-1)?.content ?? '') } },
        status: 'success',
      }));
      const res = await h.json<{ reports: { job_id: string; accepted: boolean; replayed: boolean }[]; jobs: JobData[] }>(
        'POST',
        '/worker/jobs/next',
        auth,
        { reports, max_jobs: last ? 0 : maxJobs, wait: last ? 0 : 2 },
      );
      if (res.status !== 200) throw new Error(`jobs/next ${res.status}`);
      for (const r of res.body.reports) if (r.accepted && !r.replayed) reported.set(r.job_id, (reported.get(r.job_id) ?? 0) + 1);
      const t = now();
      for (const job of res.body.jobs) if (!leasedAt.has(job.job_id)) leasedAt.set(job.job_id, t);
      held = res.body.jobs;
    }
  };

  // The job of a completion is known by its id, chatcmpl-<job id>, once it is done.
  const viaJobs = async (t0: number): Promise<string> => {
    const sub = await h.json<{ job_id: string }>(
      'POST',
      '/submit_job',
      { api_key: userKey },
      { model: MODEL, messages: [{ role: 'user', content: nextPrompt() }], max_output: 64, temperature: 0 },
    );
    if (sub.status !== 200) throw new Error(`submit_job ${sub.status}`);
    const id = sub.body.job_id;
    submittedAt.set(id, t0);
    for (;;) {
      const r = await h.json('GET', `/get_result/${id}?wait=30`, { api_key: userKey });
      if (r.status === 200) return id;
      if (r.status !== 404) throw new Error(`get_result ${r.status}`);
    }
  };
  const viaPolling = async (t0: number): Promise<string> => {
    const sub = await h.json<{ job_id: string }>(
      'POST',
      '/submit_job',
      { api_key: userKey },
      { model: MODEL, messages: [{ role: 'user', content: nextPrompt() }], max_output: 64, temperature: 0 },
    );
    if (sub.status !== 200) throw new Error(`submit_job ${sub.status}`);
    const id = sub.body.job_id;
    submittedAt.set(id, t0);
    for (;;) {
      const r = await h.json('GET', `/get_result/${id}`, { api_key: userKey });
      if (r.status === 200) return id;
      if (r.status !== 404) throw new Error(`get_result ${r.status}`);
      await new Promise((resolve) => setTimeout(resolve, POLL_EVERY_MS));
    }
  };
  const viaOpenAI = async (t0: number): Promise<string> => {
    const r = await h.json<{ id: string }>(
      'POST',
      '/v1/chat/completions',
      { authorization: `Bearer ${userKey}` },
      { model: MODEL, messages: [{ role: 'user', content: nextPrompt() }], max_tokens: 64, temperature: 0 },
    );
    if (r.status !== 200) throw new Error(`chat/completions ${r.status}`);
    const id = r.body.id.slice('chatcmpl-'.length);
    submittedAt.set(id, t0);
    return id;
  };
  const submitter = async () => {
    while (!stopSubmitting) {
      const t0 = now();
      const id = await (mode === 'jobs' ? viaJobs(t0) : mode === 'poll' ? viaPolling(t0) : viaOpenAI(t0));
      const t1 = now();
      if (t0 >= windowStart && t1 <= windowEnd) {
        completedInWindow++;
        toResult.push(t1 - t0);
        const leased = leasedAt.get(id);
        if (leased !== undefined) toLease.push(leased - t0);
      }
    }
  };

  const workerLoops = tokens.map((auth) => (wire.kind === 'ins' ? insWorker(auth, wire.maxJobs) : worker(auth)));
  const submitterLoops = Array.from({ length: submitters }, submitter);
  await new Promise((r) => setTimeout(r, (warmup + duration) * 1000));
  stopSubmitting = true;
  await Promise.all(submitterLoops);
  stopWorkers = true;
  await Promise.all(workerLoops);

  toLease.sort((a, b) => a - b);
  toResult.sort((a, b) => a - b);
  const lost = [...submittedAt.keys()].filter((id) => !reported.has(id)).length;
  const duplicated = [...reported.values()].filter((n) => n > 1).length;
  const round = (x: number) => Math.round(x * 10) / 10;
  return {
    jobsPerSecond: Math.round(completedInWindow / duration),
    submitToLease: { p50: round(percentile(toLease, 50)), p99: round(percentile(toLease, 99)) },
    submitToResult: { p50: round(percentile(toResult, 50)), p99: round(percentile(toResult, 99)) },
    submitted: submittedAt.size,
    completed: reported.size,
    lost,
    duplicated,
    dbCheck: '',
  };
}
