// A node's worker: registers, declares the models its backend has, and runs `concurrency` slots
// that each long-poll for a job, run it on the backend and report it with the job key.
// - The backend's model list is read again every minute: a change is declared at once, and the
//   declaration is renewed before it lapses.
// - A backend failure reports the job as an error (it goes back to the queue for another node),
//   then the worker declares no models until the backend answers again, so it takes no job it
//   cannot run.
// - The coordinator unreachable: every call backs off and retries for ever (coordinator-client.ts).
//   A 401 (the session ended) registers again.
// - A slot asks for its next job while the report of its last one is on its way (each slot
//   holds at most two leases, so the session's capacity is twice --concurrency): the
//   coordinator's time to take a report is not lost to the node.
// - stop(): no new polls, the jobs in flight finish (up to the grace period), then deregister.
import { createBackend, type Backend } from './backends.js';
import { CoordinatorClient, CoordinatorError, type Job } from './coordinator-client.js';
import type { WorkerOptions } from './options.js';

export type WorkerState = 'starting' | 'waiting' | 'working' | 'backend down' | 'stopping' | 'stopped';

export interface WorkerEvents {
  log: (level: 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>) => void;
  /** seconds: from the job taken to its report answered; overhead: the worker's own part of it (before the report, less the backend's time). */
  jobDone: (job: Job, outcome: 'success' | 'error' | 'refused', seconds: number, points: number, overhead: number) => void;
}

const MODELS_CHECK_MS = 60_000;
const BACKEND_RETRY_MS = [1_000, 2_000, 5_000, 10_000, 30_000];
const PROGRESS_EVERY_MS = 100;

export class Worker {
  state: WorkerState = 'starting';
  readonly current = new Map<number, { job: Job; since: number }>();
  jobsDone = 0;
  private models: string[] = [];
  private declaredAt = 0;
  private expiresIn = 0;
  private readonly stopping = new AbortController();
  private readonly polls = new Set<AbortController>();
  private backendDown: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  readonly client: CoordinatorClient;
  private readonly backend: Backend;

  constructor(private readonly opts: WorkerOptions, private readonly events: WorkerEvents) {
    this.backend = createBackend(opts.backend, opts.backendUrl);
    this.client = new CoordinatorClient(opts.server, opts.node, opts.key, {
      retrying: (what, attempt, reason) => events.log('warn', `${what} failed (${reason}); retrying`, { attempt }),
    }, this.stopping.signal);
  }

  /** Runs until stop(); resolves once the worker deregistered. */
  async run(): Promise<void> {
    await this.client.register(this.capacity);
    this.events.log('info', 'registered', { node: this.opts.node, server: this.opts.server });
    await this.refreshModels(true);
    this.timer = setInterval(() => void this.refreshModels(false).catch((err: unknown) => this.events.log('warn', `model check failed: ${String(err)}`)), MODELS_CHECK_MS);
    this.timer.unref();
    await Promise.all(Array.from({ length: this.opts.concurrency }, (_, slot) => this.slot(slot)));
    clearInterval(this.timer);
    try {
      await this.client.deregister();
      this.events.log('info', 'deregistered');
    } catch (err) {
      this.events.log('warn', `deregister failed: ${String(err)}`);
    }
    this.state = 'stopped';
  }

  /** Stops polling; jobs in flight get graceMs to finish (run() resolves when they did). */
  stop(): void {
    if (this.stopping.signal.aborted) return;
    this.state = 'stopping';
    this.stopping.abort();
    for (const p of this.polls) p.abort();
    this.events.log('info', `stopping: ${this.current.size} job(s) in flight, up to ${this.opts.graceMs / 1000} s to finish`);
  }

  /** Leases the session may hold: a job running and one being reported, per slot. */
  private get capacity(): number {
    return 2 * this.opts.concurrency;
  }

  private async backendModels(): Promise<string[]> {
    const all = await this.backend.models();
    return this.opts.models.length ? all.filter((m) => this.opts.models.includes(m)) : all;
  }

  /** Declares the backend's models when they changed, or when the declaration nears its end. */
  private async refreshModels(first: boolean): Promise<void> {
    if (this.backendDown) return;
    const models = await this.backendModels();
    const changed = models.length !== this.models.length || models.some((m, i) => m !== this.models[i]);
    const renew = Date.now() - this.declaredAt > (this.expiresIn * 1000) / 2;
    if (!first && !changed && !renew) return;
    await this.declare(models);
    if (models.length === 0) this.events.log('warn', `the backend serves none of the models${this.opts.models.length ? ` (${this.opts.models.join(', ')})` : ''}: no jobs until it does`);
  }

  private async declare(models: string[]): Promise<void> {
    try {
      this.expiresIn = await this.client.declare(models);
    } catch (err) {
      if (!(err instanceof CoordinatorError && err.status === 401)) throw err;
      await this.reregister();
      this.expiresIn = await this.client.declare(models);
    }
    this.models = models;
    this.declaredAt = Date.now();
    this.events.log('info', 'models declared', { models });
  }

  /** The session ended (deregistered elsewhere, key rotated, server's database reset): a new one. */
  private async reregister(): Promise<void> {
    this.events.log('warn', 'the session is no longer valid: registering again');
    await this.client.register(this.capacity);
  }

  private async slot(slot: number): Promise<void> {
    let reporting: Promise<void> = Promise.resolve();
    while (!this.stopping.signal.aborted) {
      if (this.backendDown) await this.backendDown;
      if (this.stopping.signal.aborted) break;
      const poll = new AbortController();
      this.polls.add(poll);
      let job: Job | null = null;
      try {
        if (this.current.size === 0) this.state = 'waiting';
        job = await this.client.nextJob(this.opts.pollWait, poll.signal);
      } catch (err) {
        if (poll.signal.aborted || this.stopping.signal.aborted) break;
        if (err instanceof CoordinatorError && err.status === 401) await this.reregister().then(() => this.refreshModels(true));
        else this.events.log('error', `get_job: ${String(err)}`);
        continue;
      } finally {
        this.polls.delete(poll);
      }
      if (!job) continue;
      const report = await this.work(slot, job);
      // The last report must be answered before this one goes: at most two leases per slot.
      await reporting;
      reporting = report();
    }
    await reporting;
  }

  /** Runs the job on the backend; resolves with the function that reports it. */
  private async work(slot: number, job: Job): Promise<() => Promise<void>> {
    const started = Date.now();
    const t0 = performance.now();
    let backendMs = 0;
    this.current.set(slot, { job, since: started });
    this.state = 'working';
    // A job in flight finishes unless the grace period after a stop runs out.
    const grace = new AbortController();
    const onStop = () => setTimeout(() => grace.abort(), this.opts.graceMs).unref();
    this.stopping.signal.addEventListener('abort', onStop, { once: true });
    let outcome: 'success' | 'error' | 'refused' = 'success';
    let report: Parameters<CoordinatorClient['report']>[1];
    try {
      const b0 = performance.now();
      const answer = await this.backend.chat(job, job.stream ? this.progressSender(job) : undefined, grace.signal);
      backendMs = performance.now() - b0;
      report = { status: 'success', content: answer.content, usage: answer.usage };
    } catch (err) {
      outcome = 'error';
      report = { status: 'error', content: '', usage: null, error: `backend: ${(err as Error).message}`.slice(0, 300) };
      this.events.log('error', `job ${job.job_id} failed on the backend: ${(err as Error).message}`);
      if (!grace.signal.aborted) this.markBackendDown();
    } finally {
      this.stopping.signal.removeEventListener('abort', onStop);
      this.current.delete(slot);
    }
    return async () => {
      const overhead = (performance.now() - t0 - backendMs) / 1000;
      let points = 0;
      try {
        points = await this.client.report(job, report);
      } catch (err) {
        outcome = 'refused';
        this.events.log('warn', `the report of job ${job.job_id} was refused: ${String(err)}`);
      }
      if (outcome === 'success') this.jobsDone++;
      this.events.jobDone(job, outcome, (Date.now() - started) / 1000, points, overhead);
    };
  }

  /** Partial output, sent at most every PROGRESS_EVERY_MS, in order. */
  private progressSender(job: Job): (delta: string) => void {
    let pending = '';
    let sending: Promise<void> | undefined;
    const flush = (): Promise<void> => {
      const delta = pending;
      pending = '';
      return this.client.progress(job, delta).catch(() => undefined);
    };
    return (delta) => {
      pending += delta;
      sending ??= new Promise<void>((r) => setTimeout(r, PROGRESS_EVERY_MS)).then(flush).finally(() => { sending = undefined; });
    };
  }

  /** Declares no models until the backend answers again, then declares them anew. */
  private markBackendDown(): void {
    if (this.backendDown) return;
    this.state = 'backend down';
    this.backendDown = (async () => {
      await this.declare([]).catch(() => undefined);
      for (let i = 0; !this.stopping.signal.aborted; i++) {
        await new Promise((r) => setTimeout(r, BACKEND_RETRY_MS[Math.min(i, BACKEND_RETRY_MS.length - 1)]));
        try {
          const models = await this.backendModels();
          this.backendDown = undefined;
          await this.declare(models);
          this.events.log('info', 'the backend answers again');
          return;
        } catch {
          // still down
        }
      }
      this.backendDown = undefined;
    })();
  }
}
