// Hands queued jobs to waiting workers, on one server. A get_job poll becomes a waiter; waiters
// are matched with jobs in rounds — one statement (jobs/sql/lease.ts) per round, for every waiter
// that may find a job — so a burst of polls or submissions costs a few statements, not one each.
//
// When to look, without polling the database in a loop:
// - a new waiter looks once, unless every model it serves is known to have no queued job;
// - when jobs are queued (a submission here, or JOBS_CHANNEL from another server), as many
//   waiters of those models as there are new jobs look again; a round that found as many
//   jobs as it asked for lets as many more look, until the queue runs dry;
// - a round that found fewer jobs than it asked for marks its models empty, unless jobs of
//   them were queued meanwhile, or the round's statement saw queued jobs it did not hand out
//   (jobs another server holds; asks of a suspended node);
// - copies of jobs to check a node (src/verify/) are tracked apart: a model with copies waiting
//   still takes hand-offs; a new long poll does not look for them (they are offered as they
//   are queued, and by the recheck below), but a poll that looks once does.
// - a round whose waiters left queued jobs they could not take (the jobs need a capability their
//   node did not declare: tools, embeddings…) hands them on: the waiting polls of other
//   capabilities look, once per model and generation of queued jobs, so a job for the one node
//   able to run it does not wait for the recheck while nodes unable to are woken for it;
//   copies likewise, to the other waiting polls of their models but those of nodes that got
//   nothing in the round (a copy never goes to the node it checks, whose polls often waited longest);
// "Empty" is trusted only while notifications are reliable (LISTEN live); besides, once a
// second a cheap query asks which waited-for models do have queued jobs or copies (jobs
// another server locked and let go, notifications missed, copies no waiter could take).
// A job submitted on this server for a model with no queued job goes straight to a waiter of
// that model, in the submission's own statement (claim(), jobs/submit.ts): no queue, no round.
import type { SessionRow } from '../repositories/sessions.js';
import { newKey } from '../keys.js';
import type { Ask, Group, LeasedJob, LeaseRound } from './sql/lease.js';
import type { JobRequest } from './request.js';
import type { Outcome } from './outcome.js';
import type { LiveConsumer } from './lifecycle.js';

export interface DeliveredJob {
  jobId: string;
  jobKey: string;
  keyHash: string;
  model: string;
  request: JobRequest;
  attempt: number;
  queuedSeconds: number;
  /** The answer's beginning an earlier attempt streamed (job_data.answer_prefix); empty when none. */
  prefix: string;
}

/** A waiting poll taken out of waiting to get a job straight from a submission (claim()). */
export interface Claim {
  sessionId: number;
  nodeId: number;
  keyHash: string;
  rank: number;
  /** The context length its session declared for the claimed model (0: none): a job estimated longer is not handed to it (jobs/submit.ts). */
  context: number;
  readonly waiter: unknown;
}

/** What the dispatcher needs of the lifecycle (jobs/coordinator.ts binds it). */
export interface DispatchStore {
  lease(asks: Ask[], groups: Group[]): Promise<LeaseRound>;
  /** Gives back a lease its worker never got (it hung up meanwhile); it is no attempt. */
  undeliver(keyHash: string): Promise<void>;
  /** Ends the session's oldest open lease: it asks for more than it can hold, so it gave that one up. */
  abandonOldest(sessionId: number): Promise<void>;
  /** Which of these models have queued jobs, and which queued copies. */
  queuedModels(modelIds: number[]): Promise<{ jobs: number[]; copies: number[] }>;
}

interface Waiter {
  session: SessionRow;
  models: number[];
  /** What the session can do with each of `models` (aligned; jobs/capabilities.ts): part of the group key. */
  caps: number[];
  /** The context length the session declared for each of `models` (aligned; 0: none; jobs/context.ts): part of the group key. */
  contexts: number[];
  groupKey: string;
  /** wait=0: answer after the first look. */
  once: boolean;
  /** Over the session's capacity, answer "no job" rather than give up its oldest lease (jobs/next: the worker counts its own room). */
  keep: boolean;
  gone: () => boolean;
  settle: (job: DeliveredJob | null) => void;
  settled: boolean;
  timer?: NodeJS.Timeout;
}

export interface DispatcherOptions {
  /** Most waiters in one round. */
  maxBatch?: number;
  /** How often the waited-for models are checked for queued jobs anyway (0: never; only to show a test that a job reaches its node without it). */
  recheckMs?: number;
  /** Remember models known to have no queued job (a new long poll then waits without a round); off only to measure what it saves. */
  trackEmpty?: boolean;
  onError: (err: unknown) => void;
}

const RETRY_MS = 250;

export class Dispatcher implements LiveConsumer {
  private readonly waiters = new Set<Waiter>();
  private readonly byModel = new Map<number, Set<Waiter>>();
  private readonly bySession = new Map<number, Set<Waiter>>();
  /** Waiters to look in the next round, in the order they started waiting. */
  private readonly pending = new Set<Waiter>();
  /**
   * Waiters whose round's statement is running: a submission must not claim them, or the two
   * statements could both lease to one poll (one lease goes back, or the hand-off fails on the
   * session's capacity and its job is queued).
   */
  private readonly looking = new Set<Waiter>();
  private readonly empty = new Set<number>();
  /** Per model, bumped whenever jobs of it are queued: a round may mark a model empty only if this did not move. */
  private readonly queuedGeneration = new Map<number, number>();
  /**
   * Models whose copies (jobs run again to check a node, src/verify/) may be queued. Copies do
   * not make a model non-empty for hand-offs — a submission still goes straight to a waiting
   * worker — but a poll that looks once does look while one may wait for it.
   */
  private readonly copies = new Set<number>();
  /** Per model, the generation of queued jobs last handed on to waiters of other capabilities (handOn()). */
  private readonly handedOn = new Map<number, number>();
  private readonly copiesGeneration = new Map<number, number>();
  /** Per model, the generation of copies last handed on to the other waiters (handOn()). */
  private readonly copiesHandedOn = new Map<number, number>();
  private live = false;
  private running = false;
  /** close() was called: the server is stopping, and polls answer at once. */
  private closed = false;
  /** The recheck's timer; none when it is off (recheckMs 0). */
  private readonly timer: NodeJS.Timeout | undefined;
  private readonly maxBatch: number;

  private readonly trackEmpty: boolean;

  constructor(
    private readonly store: DispatchStore,
    private readonly opts: DispatcherOptions,
  ) {
    this.maxBatch = opts.maxBatch ?? 64;
    this.trackEmpty = opts.trackEmpty ?? true;
    if (opts.recheckMs !== 0)
      this.timer = setInterval(() => {
        this.recheck().catch(opts.onError);
      }, opts.recheckMs ?? 1_000).unref();
  }

  /** Jobs and copies queued, here or on another server, wake as many waiters of their models. */
  apply(o: Outcome): void {
    if (o.queued.size > 0) this.queued(o.queued);
    if (o.copies.size > 0) this.queued(o.copies, 'copies');
  }

  /** Number of polls waiting for a job (a metric). */
  get waiting(): number {
    return this.waiters.size;
  }

  /**
   * Of those, the polls with no look of theirs queued or running: a job submitted now goes to
   * the first of them (claim()). A poll's first look is a round of its own, and a submission
   * meanwhile passes it by (tests that give a job to one poll of several wait for this).
   */
  get idleWaiting(): number {
    let n = 0;
    for (const w of this.waiters) if (this.idle(w)) n++;
    return n;
  }

  /** No look of this waiter's is queued or running. */
  private idle(w: Waiter): boolean {
    return !this.pending.has(w) && !this.looking.has(w);
  }

  /** Notifications are reliable (true) or may have been missed (false): "empty" is trusted only while live. */
  setLive(live: boolean): void {
    this.live = live;
    this.empty.clear();
    this.copies.clear();
    if (live) this.wakeAll();
  }

  /** This server knows none of these models has a queued job (copies aside). */
  private noQueuedJobs(models: readonly number[]): boolean {
    return this.live && this.trackEmpty && models.every((m) => this.empty.has(m));
  }

  /** This server knows none of the session's models has a queued job or copy: a poll that looks once would find nothing. */
  knownEmpty(session: SessionRow): boolean {
    return this.noQueuedJobs(session.models) && session.models.every((m) => !this.copies.has(m));
  }

  /**
   * A job for the session, or null after waitMs (0: look once). `gone` tells whether the
   * client hung up; a job found for a gone client goes back at once. `keep`: a session at its
   * capacity gets no job (get_job's poll gives up the session's oldest lease instead).
   */
  next(session: SessionRow, waitMs: number, gone: () => boolean, keep = false): Promise<DeliveredJob | null> {
    // Stopping (close()): a poll that arrives now, on a connection still open, answers at once —
    // it would otherwise hold the stop for its whole wait, past SHUTDOWN_TIMEOUT_MS and a
    // container's 10 s stop timeout (an outside probe: exit 137 with a worker connected).
    if (this.closed) return Promise.resolve(null);
    if (session.models.length === 0) return this.sleep(waitMs, gone);
    return new Promise((resolve) => {
      const capsOf = new Map(session.models.map((m, i) => [m, session.caps?.[i] ?? 0]));
      const models = [...session.models].sort((a, b) => a - b);
      const caps = models.map((m) => capsOf.get(m)!);
      // Most sessions declare no context (the seed's worker never does): no map to build then.
      const declared = session.contexts?.some((c) => c > 0) ? new Map(session.models.map((m, i) => [m, session.contexts![i] ?? 0])) : undefined;
      const contexts = models.map((m) => declared?.get(m) ?? 0);
      const w: Waiter = {
        session,
        models,
        caps,
        contexts,
        groupKey: `${models.join(',')}|${caps.join(',')}|${contexts.join(',')}`,
        once: waitMs <= 0,
        keep,
        gone,
        settled: false,
        settle: () => {},
      };
      w.settle = (job) => {
        if (w.settled) return;
        w.settled = true;
        clearTimeout(w.timer);
        this.remove(w);
        resolve(job);
      };
      // A session waits with at most as many polls as it can hold jobs: an older poll beyond
      // that was given up by its worker.
      const mine = this.bySession.get(session.id);
      while (mine && mine.size >= session.capacity) mine.values().next().value!.settle(null);
      this.add(w);
      // No job for it: a long poll waits to be claimed or woken (copies are offered to waiters
      // as they are queued, and once a second by recheck()); a poll that looks once looks for
      // copies now, or a worker that never waits would never get one.
      if (w.once) {
        if (this.knownEmpty(session)) return w.settle(null);
      } else {
        w.timer = setTimeout(() => w.settle(null), waitMs);
        if (this.noQueuedJobs(models)) return;
      }
      this.pend(w);
    });
  }

  /**
   * Takes up to `counts` waiters per model out of waiting, for jobs about to be submitted here,
   * where the model has no queued job (older jobs go first). Each claim is settled with
   * settleClaim once the submission committed.
   */
  claim(counts: Map<number, number>): Map<number, Claim[]> {
    const out = new Map<number, Claim[]>();
    if (!this.live || !this.trackEmpty) return out;
    const ranks = new Map<number, number>();
    for (const [model, count] of counts) {
      if (!this.empty.has(model)) continue;
      const taken: Waiter[] = [];
      for (const w of this.byModel.get(model) ?? []) {
        if (taken.length >= count) break;
        if (!w.settled && this.idle(w) && !w.gone()) taken.push(w);
      }
      out.set(
        model,
        taken.map((w) => {
          this.remove(w);
          const rank = (ranks.get(w.session.id) ?? 0) + 1;
          ranks.set(w.session.id, rank);
          const key = newKey('job');
          return {
            sessionId: w.session.id,
            nodeId: w.session.node.id,
            keyHash: key.hash,
            rank,
            context: w.contexts[w.models.indexOf(model)] ?? 0,
            waiter: { w, key },
          };
        }),
      );
    }
    return out;
  }

  /**
   * The claim's job, leased to it by the submission; null: it was not (it waits on). Never
   * fails: a job that cannot be delivered and cannot be given back either is left to its
   * lease's expiry, and the failure reported.
   */
  settleClaim(claim: Claim, job: LeasedJob | null): void {
    const { w, key } = claim.waiter as { w: Waiter; key: { key: string; hash: string } };
    if (job) {
      this.deliver(w, job, key).catch(this.opts.onError);
      return;
    }
    if (w.settled) return;
    this.add(w);
    this.pend(w);
  }

  /** Jobs (or copies) were queued: `counts` per model. */
  queued(counts: Map<number, number>, what: 'jobs' | 'copies' = 'jobs'): void {
    for (const [model, count] of counts) {
      if (what === 'copies') {
        this.copies.add(model);
        this.copiesGeneration.set(model, (this.copiesGeneration.get(model) ?? 0) + 1);
      } else {
        this.empty.delete(model);
        this.queuedGeneration.set(model, (this.queuedGeneration.get(model) ?? 0) + 1);
      }
      let n = count;
      for (const w of this.byModel.get(model) ?? []) {
        if (n <= 0) break;
        if (this.pending.has(w)) continue;
        this.pend(w);
        n--;
      }
    }
  }

  /**
   * The node (or one session of it) can no longer take jobs (disabled, key rotated, suspended,
   * deregistered: nodes/lifecycle.ts): its waiting polls answer now, with no job; a job a round
   * found for one meanwhile goes back (deliver()).
   */
  endPolls(nodeId: number, sessionId?: number): void {
    for (const w of [...this.waiters]) {
      if (w.session.node.id === nodeId && (sessionId === undefined || w.session.id === sessionId)) w.settle(null);
    }
  }

  close(): void {
    this.closed = true;
    clearInterval(this.timer);
    for (const w of [...this.waiters]) w.settle(null);
  }

  private sleep(waitMs: number, gone: () => boolean): Promise<null> {
    if (waitMs <= 0 || gone()) return Promise.resolve(null);
    return new Promise((resolve) => setTimeout(() => resolve(null), waitMs).unref());
  }

  private wakeAll(): void {
    for (const w of this.waiters) this.pend(w);
  }

  private pend(w: Waiter): void {
    if (w.settled) return;
    this.pending.add(w);
    if (!this.running) {
      this.running = true;
      setImmediate(() => {
        this.rounds().catch(this.opts.onError);
      });
    }
  }

  private add(w: Waiter): void {
    const mine = this.bySession.get(w.session.id) ?? new Set<Waiter>();
    this.bySession.set(w.session.id, mine);
    mine.add(w);
    this.waiters.add(w);
    for (const m of w.models) {
      const set = this.byModel.get(m) ?? new Set<Waiter>();
      this.byModel.set(m, set);
      set.add(w);
    }
  }

  private remove(w: Waiter): void {
    this.waiters.delete(w);
    this.pending.delete(w);
    for (const m of w.models) this.byModel.get(m)?.delete(w);
    const mine = this.bySession.get(w.session.id);
    mine?.delete(w);
    if (mine?.size === 0) this.bySession.delete(w.session.id);
  }

  private async rounds(): Promise<void> {
    while (this.pending.size > 0) {
      const batch: Waiter[] = [];
      for (const w of this.pending) {
        this.pending.delete(w);
        if (w.gone()) w.settle(null);
        else batch.push(w);
        if (batch.length >= this.maxBatch) break;
      }
      if (batch.length === 0) continue;
      for (const w of batch) this.looking.add(w);
      try {
        await this.round(batch);
      } catch (err) {
        // The database is away for a moment: a poll that looks once answers "no job" (the
        // worker polls again), the others look again shortly, within their wait.
        this.opts.onError(err);
        for (const w of batch) {
          if (w.once) w.settle(null);
          else setTimeout(() => this.pend(w), RETRY_MS).unref();
        }
      } finally {
        for (const w of batch) this.looking.delete(w);
      }
    }
    this.running = false;
  }

  private async round(batch: Waiter[]): Promise<void> {
    const generations = new Map<number, number>();
    const copyGenerations = new Map<number, number>();
    const groups = new Map<string, { group: Group; waiters: Waiter[] }>();
    const asks: Ask[] = [];
    const keys = new Map<Waiter, { key: string; hash: string }>();
    const ranks = new Map<number, number>();
    for (const w of batch) {
      for (const m of w.models) {
        generations.set(m, this.queuedGeneration.get(m) ?? 0);
        copyGenerations.set(m, this.copiesGeneration.get(m) ?? 0);
      }
      let g = groups.get(w.groupKey);
      if (!g)
        groups.set(
          w.groupKey,
          (g = { group: { group: groups.size + 1, models: w.models, caps: w.caps, contexts: w.contexts, count: 0 }, waiters: [] }),
        );
      g.group.count++;
      g.waiters.push(w);
      const rank = (ranks.get(w.session.id) ?? 0) + 1;
      ranks.set(w.session.id, rank);
      const key = newKey('job');
      keys.set(w, key);
      asks.push({ group: g.group.group, slot: g.group.count, sessionId: w.session.id, nodeId: w.session.node.id, keyHash: key.hash, rank });
    }
    const { rows, jobsLeft, copiesLeft } = await this.store.lease(
      asks,
      [...groups.values()].map((g) => g.group),
    );

    const byGroup = [...groups.values()];
    const found = new Map<number, number>();
    const answered = new Set<Waiter>();
    for (const row of rows) {
      const g = byGroup[row.group - 1]!;
      const w = g.waiters[row.slot - 1]!;
      answered.add(w);
      if ('overCapacity' in row) {
        if (w.keep) {
          w.settle(null);
          continue;
        }
        await this.store.abandonOldest(w.session.id);
        this.pend(w);
        continue;
      }
      found.set(row.group, (found.get(row.group) ?? 0) + 1);
      await this.deliver(w, row, keys.get(w)!);
    }
    for (const [i, g] of byGroup.entries()) {
      const got = found.get(i + 1) ?? 0;
      const models = g.group.models;
      // Jobs (or copies) left over and every ask served: as many other waiters may look.
      // Nothing left: the models are empty, unless jobs of them were queued meanwhile.
      if (jobsLeft.has(i + 1)) {
        if (got >= g.group.count) this.queued(new Map(models.map((m) => [m, g.group.count])));
        // Waiters of the round's own groups would find what it found: they wait for new jobs or the recheck.
        else this.handOn(models, generations, this.handedOn, (w) => groups.has(w.groupKey));
      } else if (this.live && this.trackEmpty) {
        for (const m of models) if ((this.queuedGeneration.get(m) ?? 0) === generations.get(m)) this.empty.add(m);
      }
      if (copiesLeft.has(i + 1)) {
        if (got >= g.group.count) this.queued(new Map(models.map((m) => [m, g.group.count])), 'copies');
        else {
          // Whatever their capabilities, but not the polls of nodes whose polls got nothing here:
          // those cannot take these copies either.
          const refused = new Set(g.waiters.filter((w) => !answered.has(w)).map((w) => w.session.node.id));
          this.handOn(models, copyGenerations, this.copiesHandedOn, (w) => refused.has(w.session.node.id));
        }
      } else if (this.live) {
        for (const m of models) if ((this.copiesGeneration.get(m) ?? 0) === copyGenerations.get(m)) this.copies.delete(m);
      }
      for (const w of g.waiters) if (!answered.has(w) && w.once) w.settle(null);
    }
  }

  /**
   * Queued jobs (or copies) of `models` were left by a round whose waiters could not take them —
   * the jobs need a capability their nodes did not declare; a copy never goes to the node whose
   * answer it checks, and that node's other polls are often the ones that waited longest — so
   * the other waiting polls of those models look, but those `skip` names: once per model and
   * generation of jobs or copies (`generations`, read at the round's start; `handed` remembers
   * the last one handed on), so rounds that cannot take them do not wake each other without end.
   * The round's own waiters are still `looking`, so none of them is woken.
   */
  private handOn(models: number[], generations: Map<number, number>, handed: Map<number, number>, skip: (w: Waiter) => boolean): void {
    for (const m of models) {
      const generation = generations.get(m) ?? 0;
      if (handed.get(m) === generation) continue;
      handed.set(m, generation);
      for (const w of this.byModel.get(m) ?? []) {
        if (!skip(w) && !this.pending.has(w) && !this.looking.has(w)) this.pend(w);
      }
    }
  }

  private async deliver(w: Waiter, row: LeasedJob, key: { key: string; hash: string }): Promise<void> {
    if (w.settled || w.gone()) {
      await this.store.undeliver(key.hash);
      return;
    }
    w.settle({
      jobId: row.jobId,
      jobKey: key.key,
      keyHash: key.hash,
      model: row.model,
      request: row.request,
      attempt: row.attempt,
      queuedSeconds: row.queuedSeconds,
      prefix: row.prefix,
    });
  }

  private async recheck(): Promise<void> {
    if (this.waiters.size === 0) return;
    if (!this.live) return this.wakeAll();
    try {
      const { jobs, copies } = await this.store.queuedModels([...this.byModel.keys()].filter((m) => (this.byModel.get(m)?.size ?? 0) > 0));
      this.queued(new Map(jobs.map((m) => [m, this.byModel.get(m)?.size ?? 0])));
      this.queued(new Map(copies.map((m) => [m, this.byModel.get(m)?.size ?? 0])), 'copies');
    } catch (err) {
      this.opts.onError(err);
    }
  }
}
