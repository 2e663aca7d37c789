// A node's worker: registers, declares the models its backend has, and runs `concurrency` slots
// that each long-poll for a job, run it on the backend and report it with the job key.
// - The backend's model list is read again every minute: a change is declared at once, and the
//   declaration is renewed before it lapses.
// - A backend failure reports the job as an error (it goes back to the queue for another node),
//   then the worker declares no models until the backend answers again, so it takes no job it
//   cannot run. A backend's 4xx about the request itself (context length, invalid schema:
//   backend.ts requestErrorOf) is the request's error: reported as such (the job fails at once,
//   docs/openai.md), and the backend is not marked down.
// - With its models it declares what the backend can do with each (backend.capabilities), so it
//   is offered jobs that need tools, JSON output, logprobs or sampling options; and `score`
//   where the backend can score another node's answer (issue 31: score-job.ts).
// - A job whose answer an earlier attempt began (`answer_prefix`: its node failed mid-answer)
//   is continued on a backend that can (backend.ts), and only the continuation is sent as
//   progress; the report carries the whole answer, with the worker's own usage. A backend that
//   cannot continue runs the job from the start (and relays only what follows the prefix, while
//   its answer matches it: progress.ts afterPrefix).
// - Every running job sends job_progress at least every second (progress.ts): a 400 there means
//   the lease has ended (canceled, expired, finished elsewhere), so the backend request is
//   aborted at once, the job is not reported, and the slot takes its next job.
// - The coordinator unreachable: every call backs off and retries for ever (coordinator-client.ts).
//   A 401 (the session ended) registers again.
// - The network's own wire (POST /worker/jobs/next, exchange()): a slot's report and its ask for
//   the next job go in one call; one call asks for every idle slot (the others park until it
//   answers), so a burst of jobs reaches several slots in one round trip. A call refused whole
//   (or a 401) reports through update_result, the seed's wire, whose answers are each report's own.
//   The session may hold twice --concurrency leases (register_node's capacity), so a call's
//   asks never give up a lease the worker holds.
// - stop(): no new polls, the jobs in flight finish (up to the grace period) and are reported, then deregister.
import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { BackendError, createBackend, type Backend, type BackendAnswer } from './backends.js';
import { requestErrorOf } from './backend.js';
import { CoordinatorClient, CoordinatorError, type Exchanged, type Job, type Report, type ReportAnswer } from './coordinator-client.js';
import type { WorkerOptions } from './options.js';
import { afterPrefix, LeaseLink } from './progress.js';
import { scoreJob } from './score-job.js';
import { tokensOf } from '../validation/answer-tokens.js';

/** register_node's largest `capacity` (openapi.json, RegisterNodeRequest): above 32 slots a slot has no spare lease. */
const MAX_CAPACITY = 64;

export type WorkerState = 'starting' | 'waiting' | 'working' | 'backend down' | 'stopping' | 'stopped';

/** success/error: reported so; refused: the report was refused, or never reached the coordinator (a stop while it was away); canceled: the lease ended while the job ran (aborted, not reported). */
export type JobOutcome = 'success' | 'error' | 'refused' | 'canceled';

export interface WorkerEvents {
  log: (level: 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>) => void;
  /** seconds: from the job taken to its report answered; overhead: the worker's own part of it (before the report, less the backend's time). */
  jobDone: (job: Job, outcome: JobOutcome, seconds: number, points: number, overhead: number) => void;
}

const MODELS_CHECK_MS = 60_000;
/**
 * Seconds a call that carries a report waits for the slot's next job. Under load the next job
 * comes at once (or is handed over within milliseconds); an idle worker hears of its report
 * after at most this long, then long-polls without one.
 */
const REPORT_WAIT_S = 1;

/** A job run, with its report to send (the slot's next call carries it: exchange). */
interface Done {
  job: Job;
  report: Report;
  /** From the job taken to its report sent; overhead: the worker's own part of it (jobDone). */
  seconds: number;
  overhead: number;
}

/**
 * The job with what is left of its max_output once `prefix` (an earlier attempt's answer, which
 * this node continues) is counted, estimated as the coordinator estimates uncounted text (a
 * token per four UTF-8 bytes, rounded up: jobs/answer.ts estimateTokens), and at least 1: the
 * continued answer as a whole stays near max_tokens rather than running past it by the prefix.
 */
const leftAfter = (job: Job, prefix: string): Job =>
  job.max_output > 0 && prefix ? { ...job, max_output: Math.max(1, job.max_output - Math.ceil(Buffer.byteLength(prefix, 'utf8') / 4)) } : job;
const BACKEND_RETRY_MS = [1_000, 2_000, 5_000, 10_000, 30_000];

export class Worker {
  state: WorkerState = 'starting';
  readonly current = new Map<number, { job: Job; since: number }>();
  jobsDone = 0;
  /** Jobs aborted because their lease ended (canceled by the user, expired, finished elsewhere). */
  jobsCanceled = 0;
  private models: string[] = [];
  private declaredAt = 0;
  private expiresIn = 0;
  private readonly stopping = new AbortController();
  private readonly polls = new Set<AbortController>();
  /** Jobs a call brought beyond its slot's own, for the parked slots (exchange). */
  private readonly ready: Job[] = [];
  /** Slots without a job waiting for a call in flight, which asked for them too. */
  private readonly parked = new Set<() => void>();
  /** Calls in flight that ask for jobs, the jobs they ask for, and the reports they carry (their leases still open). */
  private polling = 0;
  private asked = 0;
  private reporting = 0;
  private backendDown: Promise<void> | undefined;
  /** Every model the backend had at the last look, --models or not (for the warning when none is served). */
  private offered: string[] = [];
  /** The node's standing in verification when last looked at (checkStanding). */
  private standing = 'trusted';
  private timer: NodeJS.Timeout | undefined;
  readonly client: CoordinatorClient;
  private readonly backend: Backend;

  constructor(
    private readonly opts: WorkerOptions,
    private readonly events: WorkerEvents,
  ) {
    this.backend = createBackend(
      opts.backend,
      opts.backendUrl,
      opts.continueAnswers,
      opts.modelFile === undefined
        ? undefined
        : { file: opts.modelFile, name: opts.models[0] ?? '', concurrency: opts.concurrency, threads: opts.threads },
      opts.quantization,
    );
    this.client = new CoordinatorClient(
      opts.server,
      opts.node,
      opts.key,
      {
        retrying: (what, attempt, reason) => events.log('warn', `${what} failed (${reason}); retrying`, { attempt }),
      },
      this.stopping.signal,
      opts.retryMaxMs,
    );
    // Listeners on the stop: one per slot's poll, one per job in flight, a declaration; at
    // --concurrency 64 well past Node's warning at 10, none of them a leak (each is removed).
    setMaxListeners(0, this.stopping.signal);
  }

  /** Runs until stop(); resolves once the worker deregistered. */
  async run(): Promise<void> {
    try {
      // The backend first: a worker started before its inference server (at boot, say) waits
      // for it unregistered, rather than showing its node online with nothing to run.
      await this.waitForBackend();
      await this.client.register(this.capacity);
      this.events.log('info', 'registered', { node: this.opts.node, server: this.opts.server });
      await this.refreshModels(true);
    } catch (err) {
      // Stopped while starting (the server away, say): no job was taken, nothing to finish.
      if (!this.stopping.signal.aborted) {
        // A session left behind would show the node online for a minute with nobody polling.
        if (this.client.token) await this.client.deregister().catch(() => undefined);
        throw err;
      }
    }
    if (!this.stopping.signal.aborted) {
      // A check the stop aborted (its declaration retried while the server is away) is no failure.
      await this.checkStanding();
      const check = async (): Promise<void> => {
        await this.refreshModels(false).catch((err: unknown) => {
          if (!this.stopping.signal.aborted) this.events.log('warn', `model check failed: ${String(err)}`);
        });
        await this.checkStanding();
      };
      this.timer = setInterval(() => {
        check().catch(() => undefined);
      }, this.opts.checkEveryMs ?? MODELS_CHECK_MS);
      this.timer.unref();
      await Promise.all(Array.from({ length: this.opts.concurrency }, (_, slot) => this.slot(slot)));
      clearInterval(this.timer);
    }
    if (!this.client.token) {
      this.state = 'stopped';
      return;
    }
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
    this.wakeParked();
    this.events.log('info', `stopping: ${this.current.size} job(s) in flight, up to ${this.opts.graceMs / 1000} s to finish`);
  }

  /** Leases the session may hold: a job running and one being reported, per slot, up to register_node's limit. */
  private get capacity(): number {
    return Math.min(2 * this.opts.concurrency, MAX_CAPACITY);
  }

  /**
   * Detects the backend, waiting (as `backend down`, with BACKEND_RETRY_MS's pauses) while an
   * inference server does not answer; a GGUF file that cannot be loaded is no wait but an error.
   */
  private async waitForBackend(): Promise<void> {
    for (let i = 0; ; i++) {
      try {
        // The model list as well: some detections (Ollama's version) answer without the server.
        await this.backend.models();
        await this.detectBackend();
        return;
      } catch (err) {
        if (this.opts.backend === 'gguf' || this.stopping.signal.aborted) throw err;
        if (i === 0) {
          this.state = 'backend down';
          this.events.log('warn', `the backend does not answer (${(err as Error).message}): waiting for it before registering`);
        }
        await this.backendPause(i);
        // Stopped while waiting: run() must not register a node it is told to stop (an outside
        // probe saw stopping → registered → deregistered). run() takes a stop's error as no failure.
        if (this.stopping.signal.aborted) throw new Error('stopped while waiting for the backend');
      }
    }
  }

  /**
   * Says when the node's standing in verification changes (and at start, when it is not
   * trusted): a suspended node's polls only ever answer "no job", so without this its operator
   * would see a worker waiting for ever. A failed look is tried again at the next check.
   */
  private async checkStanding(): Promise<void> {
    const standing = await this.client.standing().catch(() => undefined);
    if (standing === undefined || standing === this.standing) return;
    const was = this.standing;
    this.standing = standing;
    const record = `GET /network/nodes/${this.opts.node} with the node's key shows its strikes counting; the network's operator sees their evidence with \`ins node audit ${this.opts.node}\``;
    if (standing === 'suspended')
      this.events.log(
        'error',
        `node ${this.opts.node} is suspended: its answers failed verification, and it gets no jobs until the network's operator reinstates it (${record})`,
        { standing },
      );
    else if (standing === 'probation')
      this.events.log('warn', `node ${this.opts.node} is on probation: another node checks its temperature-0 answers (${record})`, { standing });
    else if (was !== 'trusted') this.events.log('info', `node ${this.opts.node} is ${standing} again`, { standing });
  }

  /** Finds out what the backend is, and whether it continues answers (again after it was down: it may have changed). */
  private async detectBackend(): Promise<void> {
    await this.backend.detect();
    const at = this.backend.url;
    this.events.log(
      'info',
      `backend: ${this.backend.name}; ${this.backend.continues ? 'continues answers another node began' : 'runs answers another node began from the start'}${at ? `; reached at ${at}` : ''}`,
      { backend: this.backend.name, continues: this.backend.continues, ...(at ? { url: at } : {}) },
    );
  }

  /** The backend's models, those of --models alone when given (a name without a tag is its `:latest`, as Ollama reads it). */
  private async backendModels(): Promise<string[]> {
    const all = await this.backend.models();
    const wanted = (m: string) => this.opts.models.some((w) => w === m || (!w.includes(':') && `${w}:latest` === m));
    this.offered = all;
    return this.opts.models.length ? all.filter(wanted) : all;
  }

  /** Declares the backend's models when they changed, or when the declaration nears its end. */
  private async refreshModels(first: boolean): Promise<void> {
    if (this.backendDown) return;
    const models = await this.backendModels();
    const changed = models.length !== this.models.length || models.some((m, i) => m !== this.models[i]);
    const renew = Date.now() - this.declaredAt > (this.expiresIn * 1000) / 2;
    if (!first && !changed && !renew) return;
    await this.declare(models);
    if (models.length === 0) {
      const has = this.offered.length ? `; it has ${this.offered.slice(0, 20).join(', ')}${this.offered.length > 20 ? ', …' : ''}` : '; it has none';
      this.events.log(
        'warn',
        `the backend serves none of the models${this.opts.models.length ? ` (${this.opts.models.join(', ')})` : ''}${has}: no jobs until it does`,
      );
    }
  }

  private async declare(models: string[]): Promise<void> {
    // `score` (issue 31) where the backend can score an answer: gguf, vLLM, Ollama ≥ 0.12.11 (score-job.ts).
    const scores: string[] = this.backend.score ? ['score'] : [];
    // An embedding model (its backend declares `embeddings` alone) generates nothing, so it scores nothing either.
    const withScores = (declared: string[]) => (declared.length === 1 && declared[0] === 'embeddings' ? declared : [...declared, ...scores]);
    const caps = Object.fromEntries(
      await Promise.all(models.map(async (m) => [m, withScores(await this.backend.capabilities(m))] as [string, string[]])),
    );
    const builds = (await this.backend.builds?.(models)) ?? {};
    // Issue 53: the context each model holds (--context-length over what the backend says): a longer job is not given to this node.
    const given = this.opts.contextLength;
    const contexts = given ? Object.fromEntries(models.map((m) => [m, given])) : ((await this.backend.contextLengths?.(models)) ?? {});
    try {
      this.expiresIn = await this.client.declare(models, caps, builds, contexts);
    } catch (err) {
      if (!(err instanceof CoordinatorError && err.status === 401)) throw err;
      await this.reregister();
      this.expiresIn = await this.client.declare(models, caps, builds, contexts);
    }
    this.models = models;
    this.declaredAt = Date.now();
    this.events.log('info', 'models declared', { models, ...(Object.keys(contexts).length ? { contexts } : {}) });
  }

  /** The session ended (deregistered elsewhere, key rotated, server's database reset): a new one. */
  private async reregister(): Promise<void> {
    this.events.log('warn', 'the session is no longer valid: registering again');
    await this.client.register(this.capacity);
  }

  private async slot(slot: number): Promise<void> {
    // The report of the slot's last job, sent with its ask for the next one.
    let done: Done | undefined;
    while (!this.stopping.signal.aborted) {
      let job = this.ready.shift() ?? null;
      if (done) {
        // A job already here (another slot's call brought it), or the backend down: report only.
        job = (await this.exchange(done, job || this.backendDown ? 0 : 1)) ?? job;
        done = undefined;
      } else if (!job) {
        if (this.backendDown) {
          await this.backendDown;
          continue;
        }
        // Another call in flight asks for this slot too (exchange): wait for what it brings.
        if (this.polling > 0) {
          await new Promise<void>((wake) => this.parked.add(wake));
          continue;
        }
        job = await this.exchange(undefined, 1);
      }
      if (job) done = await this.work(slot, job);
    }
    if (done) await this.exchange(done, 0);
  }

  /** Wakes the parked slots: each takes a job that came, or polls when no call is in flight, or parks again. */
  private wakeParked(): void {
    const parked = [...this.parked];
    this.parked.clear();
    for (const wake of parked) wake();
  }

  /**
   * One call of the network's own wire (POST /worker/jobs/next): the slot's report, if any, and
   * its ask for `want` jobs (0: report only) plus one for each parked slot, within the session's
   * room. Answers the slot's job, if one came; the others go to the parked slots. With a report
   * the call waits REPORT_WAIT_S for a job (the report's outcome comes with the answer), without
   * one --poll-wait. A call refused whole, or a 401, reports through update_result instead
   * (reportAlone: the seed's wire answers each refusal as its own, a report too large included).
   */
  private async exchange(done: Done | undefined, want: number): Promise<Job | null> {
    const held = this.current.size + this.ready.length + this.reporting + this.asked + (done ? 1 : 0);
    const max = want > 0 ? Math.max(0, Math.min(want + this.parked.size, this.capacity - held)) : 0;
    const poll = new AbortController();
    // A call that carries a report is never cut by the stop: the report must reach the coordinator.
    if (!done) this.polls.add(poll);
    if (max > 0) this.polling++;
    this.asked += max;
    if (done) this.reporting++;
    if (this.current.size === 0 && max > 0) this.state = 'waiting';
    let got: Exchanged;
    try {
      got = await this.client.exchange(done ? [done] : [], max, max === 0 ? 0 : done ? REPORT_WAIT_S : this.opts.pollWait, poll.signal);
      this.ready.push(...got.jobs.slice(1));
    } catch (err) {
      if (!done && (poll.signal.aborted || this.stopping.signal.aborted)) return null;
      if (err instanceof CoordinatorError && err.status === 401) {
        await this.reregister()
          .then(() => this.refreshModels(true))
          .catch((e: unknown) => {
            if (!this.stopping.signal.aborted) throw e;
          });
      } else if (!(err instanceof CoordinatorError && done)) this.events.log('error', `jobs/next: ${String(err)}`);
      if (done) await this.reportAlone(done);
      return null;
    } finally {
      this.polls.delete(poll);
      this.asked -= max;
      if (max > 0) this.polling--;
      if (done) this.reporting--;
      // Whatever came of it, the parked slots look again: a job for them, or no call in flight now.
      this.wakeParked();
    }
    if (done) this.answered(done, got.reports[0]);
    return got.jobs[0] ?? null;
  }

  /** The coordinator's answer to a report on the network's own wire. */
  private answered(done: Done, answer: ReportAnswer | undefined): void {
    let outcome: JobOutcome = done.report.status;
    if (!answer?.accepted) {
      outcome = 'refused';
      this.events.log('warn', `the report of job ${done.job.job_id} was refused: ${answer?.detail ?? 'no answer'}`);
    }
    if (outcome === 'success') this.jobsDone++;
    this.events.jobDone(done.job, outcome, done.seconds, answer?.points ?? 0, done.overhead);
  }

  /** Runs the job on the backend; resolves with its report, or undefined when there is none (the lease ended, or --grace ran out). */
  private async work(slot: number, job: Job): Promise<Done | undefined> {
    const started = Date.now();
    const t0 = performance.now();
    let backendMs = 0;
    this.current.set(slot, { job, since: started });
    this.state = 'working';
    // The backend call ends early when the grace period after a stop runs out, or the lease ended.
    const abort = new AbortController();
    const onStop = () => setTimeout(() => abort.abort(), this.opts.graceMs).unref();
    this.stopping.signal.addEventListener('abort', onStop, { once: true });
    const link = new LeaseLink(this.client, job, () => abort.abort());
    link.start();
    let report: Report | undefined;
    try {
      const b0 = performance.now();
      const { prefix, answer } = await this.runJob(job, link, abort.signal);
      backendMs = performance.now() - b0;
      report = {
        status: 'success',
        content: prefix + answer.content,
        usage: answer.usage,
        ...(answer.tool_calls ? { tool_calls: answer.tool_calls } : {}),
        ...(answer.logprobs ? { logprobs: answer.logprobs } : {}),
        ...(answer.finish_reason ? { finish_reason: answer.finish_reason } : {}),
        ...(answer.embeddings ? { embeddings: answer.embeddings } : {}),
        ...(answer.scores ? { scores: answer.scores } : {}),
        // Issue 53: the answer's tokens, for a plain text answer this node wrote whole (a continued one's beginning is another's).
        ...(answer.tokens && prefix === '' && !answer.tool_calls?.length ? { tokens: answer.tokens } : {}),
      };
    } catch (err) {
      const refused = requestErrorOf(err);
      if (this.stopping.signal.aborted && abort.signal.aborted && link.ended === undefined) {
        // --grace ran out while the worker stops: the backend did not fail, so nothing is
        // reported; the deregistration that follows gives the job back to the queue at once,
        // where another node continues it (no error report, which would count against the node).
        this.events.log('warn', `job ${job.job_id}: --grace ran out; it goes back to the queue when this worker deregisters`, { job: job.job_id });
      } else if (link.ended === undefined && refused) {
        // The request's own error: the job fails with it; the backend is fine.
        report = { status: 'error', content: '', usage: null, error: refused.message.slice(0, 300), requestError: refused };
        this.events.log(
          'warn',
          `job ${job.job_id}: the backend refused the request (${refused.code ?? 'invalid request'}): ${refused.message.slice(0, 200)}`,
        );
      } else if (link.ended === undefined) {
        report = { status: 'error', content: '', usage: null, error: `backend: ${(err as Error).message}`.slice(0, 300) };
        this.events.log('error', `job ${job.job_id} failed on the backend: ${(err as Error).message}`);
        if (!abort.signal.aborted) this.markBackendDown(err as Error);
      }
    } finally {
      this.stopping.signal.removeEventListener('abort', onStop);
      await link.stop();
      this.current.delete(slot);
    }
    const overhead = (performance.now() - t0 - backendMs) / 1000;
    if (link.ended !== undefined || !report) {
      // The lease ended while the job ran (whatever the backend gave is no one's to report), or
      // the worker gave it back at its grace's end.
      this.jobsCanceled++;
      if (link.ended !== undefined)
        this.events.log('warn', `job ${job.job_id}: the lease ended (${link.ended}); its backend request was aborted and it is not reported`, {
          job: job.job_id,
        });
      this.events.jobDone(job, 'canceled', (Date.now() - started) / 1000, 0, overhead);
      return undefined;
    }
    // seconds: from the job taken to its report sent (the report's answer may wait for the next job: exchange).
    return { job, report, seconds: (Date.now() - started) / 1000, overhead };
  }

  /** A report through update_result, alone (the seed's wire): after a 401, or a call of the network's wire refused whole. */
  private async reportAlone(done: Done): Promise<void> {
    const { job, report } = done;
    let outcome: JobOutcome = report.status;
    let points = 0;
    try {
      points = await this.client.report(job, report).catch((err: unknown) => {
        // The tokens made the report too large (BODY_LIMIT): the answer goes without them (issue 53).
        if (err instanceof CoordinatorError && err.status === 413 && report.tokens) return this.client.report(job, { ...report, tokens: undefined });
        throw err;
      });
    } catch (err) {
      if (err instanceof CoordinatorError && err.status === 413 && report.status === 'success') {
        // The answer is larger than the service takes in one report (its BODY_LIMIT): it would
        // be so on any node, so the job fails as its request's own error, at once, and its
        // client is told to ask for less, rather than waiting for the job's deadline.
        outcome = 'error';
        await this.reportTooLarge(job);
      } else {
        outcome = 'refused';
        // A status is the coordinator's refusal; anything else (a stop while it was away) never reached it.
        this.events.log(
          'warn',
          err instanceof CoordinatorError
            ? `the report of job ${job.job_id} was refused: ${String(err)}`
            : `the report of job ${job.job_id} did not reach the coordinator (${String(err)}): the job goes back to the queue when its lease runs out`,
        );
      }
    }
    if (outcome === 'success') this.jobsDone++;
    this.events.jobDone(job, outcome, done.seconds, points, done.overhead);
  }

  private async reportTooLarge(job: Job): Promise<void> {
    const message =
      'The answer is larger than the service accepts in one report (its BODY_LIMIT): ask for less in one request (fewer inputs, or fewer tokens).';
    this.events.log('warn', `job ${job.job_id}: ${message}`);
    await this.client
      .report(job, { status: 'error', content: '', usage: null, error: message, requestError: { code: 'answer_too_large', message } })
      .catch((e: unknown) => this.events.log('warn', `the report of job ${job.job_id} was refused: ${String(e)}`));
  }

  /**
   * The job on the backend: continued from its answer_prefix where the backend can (prefix is
   * then that beginning, and answer only what follows), else from the start (prefix ""). Only
   * text that follows the prefix goes out as progress.
   */
  private async runJob(job: Job, link: LeaseLink, signal: AbortSignal): Promise<{ prefix: string; answer: BackendAnswer }> {
    const relay = (delta: string) => link.push(delta);
    if (job.params?.score !== undefined)
      return { prefix: '', answer: await scoreJob(this.backend, job, job.params.score.answer, tokensOf(job.params.score.tokens)) };
    if (job.params?.input !== undefined) return { prefix: '', answer: await this.backend.embed(job, job.params.input, signal) };
    // A text completion: the raw prompt; an answer another node began is continued by appending it to the prompt, which any backend can.
    if (job.params?.prompt !== undefined) {
      const prefix = job.answer_prefix ?? '';
      return {
        prefix,
        answer: await this.backend.complete(leftAfter(job, prefix), job.params.prompt + prefix, job.stream ? relay : undefined, signal),
      };
    }
    const fromStart = async () => ({
      prefix: '',
      answer: await this.backend.chat(job, job.stream ? (job.answer_prefix ? afterPrefix(job.answer_prefix, relay) : relay) : undefined, signal),
    });
    if (!job.answer_prefix || !this.backend.continues) return fromStart();
    let relayed = false;
    try {
      const answer = await this.backend.chat(
        { ...leftAfter(job, job.answer_prefix), prefix: job.answer_prefix },
        job.stream
          ? (d) => {
              relayed = true;
              relay(d);
            }
          : undefined,
        signal,
      );
      return { prefix: job.answer_prefix, answer };
    } catch (err) {
      // The backend refused the continuation itself (llama.cpp refuses one for a thinking model): run it from the start.
      if (relayed || !(err instanceof BackendError && err.status !== undefined && err.status >= 400 && err.status < 500)) throw err;
      this.events.log('warn', `job ${job.job_id}: the backend would not continue the answer (${err.message}); running it from the start`);
      return fromStart();
    }
  }

  /** The i-th pause before asking a backend that does not answer again (BACKEND_RETRY_MS), cut short by a stop. */
  private async backendPause(i: number): Promise<void> {
    await sleep(BACKEND_RETRY_MS[Math.min(i, BACKEND_RETRY_MS.length - 1)], undefined, { signal: this.stopping.signal }).catch(() => undefined);
  }

  /** Declares no models until the backend answers again, then declares them anew; says so once, as at start (waitForBackend). */
  private markBackendDown(err: Error): void {
    if (this.backendDown) return;
    this.state = 'backend down';
    this.events.log('warn', `the backend failed (${err.message}): no models declared, so no jobs, until it answers again`);
    this.backendDown = (async () => {
      await this.declare([]).catch(() => undefined);
      for (let i = 0; !this.stopping.signal.aborted; i++) {
        await this.backendPause(i);
        if (this.stopping.signal.aborted) break;
        try {
          const models = await this.backendModels();
          this.backendDown = undefined;
          this.events.log('info', 'the backend answers again');
          await this.detectBackend();
          await this.declare(models);
          return;
        } catch {
          // still down
        }
      }
      this.backendDown = undefined;
    })();
  }
}
