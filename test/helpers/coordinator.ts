// The coordinator's wire as its real clients speak it, over the real app (inject): a worker
// that checks its secret, registers without a credential, declares its models, polls for
// jobs and reports with the job key; a user that submits and reads results.
import type { TestApp } from './app.js';

export interface Job {
  job_id: string;
  api_key: string;
  model: string;
  messages: { role: string; content: string }[];
  max_output: number;
  temperature: number;
}

export class TestWorker {
  token = '';
  constructor(
    private readonly app: TestApp,
    readonly node: string,
    private readonly key: string,
    private readonly address = '127.0.0.1',
  ) {}

  /** check_node_secret, then register_node with no credential, then update_models: the real worker's start. */
  async start(models: string[]): Promise<this> {
    const check = await this.post('/check_node_secret', { node_id: this.node, secret: this.key });
    if (check.statusCode !== 200) throw new Error(`check_node_secret: ${check.statusCode} ${check.body}`);
    const reg = await this.post('/worker/register_node', {
      node_url: this.node,
      node_version: '0.1.0',
      stats: { ram: 64, cpu: 16, vram: 24, gpu: 'test', os: 'linux' },
    });
    if (reg.statusCode !== 200) throw new Error(`register_node: ${reg.statusCode} ${reg.body}`);
    this.token = (reg.json() as { access_token: string }).access_token;
    const upd = await this.post('/worker/update_models', { node_url: this.node, models }, true);
    if (upd.statusCode !== 200) throw new Error(`update_models: ${upd.statusCode} ${upd.body}`);
    return this;
  }

  post(url: string, payload: object, auth = false) {
    return this.app.inject({
      method: 'POST',
      url,
      payload,
      remoteAddress: this.address,
      headers: auth ? { authorization: `Bearer ${this.token}` } : {},
    });
  }

  getJobRaw(wait = 0) {
    return this.app.inject({
      method: 'GET',
      url: `/worker/get_job?node_version=0.1.0${wait ? `&wait=${wait}` : ''}`,
      remoteAddress: this.address,
      headers: { authorization: `Bearer ${this.token}` },
    });
  }

  async getJob(wait = 0): Promise<Job | null> {
    const res = await this.getJobRaw(wait);
    if (res.statusCode !== 200) throw new Error(`get_job: ${res.statusCode} ${res.body}`);
    return (res.json() as { job_data: Job | null }).job_data;
  }

  report(job: Job, content = `answer to ${job.job_id}`, status: 'success' | 'error' = 'success') {
    return this.post('/worker/update_result', {
      job_id: job.job_id,
      api_key: job.api_key,
      model_name: job.model,
      result: { message: { role: 'assistant', content } },
      status,
    });
  }

  /** A score check's report: no answer of its own, the scores (test/helpers/scores.ts workerScores). */
  reportScores(job: Job, scores: object) {
    return this.post('/worker/update_result', {
      job_id: job.job_id,
      api_key: job.api_key,
      model_name: job.model,
      status: 'success',
      result: { message: { role: 'assistant', content: '' }, scores },
    });
  }

  deregister() {
    return this.post('/worker/deregister_node', { node_url: this.node }, true);
  }
}

export class TestUser {
  constructor(
    private readonly app: TestApp,
    readonly key: string,
  ) {}

  async submit(model: string, content = 'Hello', extra: Record<string, unknown> = {}): Promise<string> {
    const res = await this.app.inject({
      method: 'POST',
      url: '/submit_job',
      headers: { api_key: this.key },
      payload: { model, messages: [{ role: 'user', content }], max_output: 0, temperature: 0, ...extra },
    });
    if (res.statusCode !== 200) throw new Error(`submit_job: ${res.statusCode} ${res.body}`);
    return (res.json() as { job_id: string }).job_id;
  }

  result(jobId: string, wait = 0) {
    return this.app.inject({ method: 'GET', url: `/get_result/${jobId}${wait ? `?wait=${wait}` : ''}`, headers: { api_key: this.key } });
  }

  /** The job's result once it has one: long polls of `wait` seconds until then (the test's timeout bounds them). */
  async resultWhenDone<T>(jobId: string, wait = 20): Promise<T> {
    for (;;) {
      const r = await this.result(jobId, wait);
      if (r.statusCode === 200) return r.json() as T;
    }
  }
}
