// Open jobs this server knows of, so that the seed's clients, which poll GET /get_result every
// few seconds until it stops answering 404, cost no statement while their job is still open.
// A job is known from the moment this server submits it, or once a poll read it open; it is
// forgotten when the lifecycle says it reached a final state (an outcome here, or announced by
// another server). The same trust rule as the dispatcher's: only while notifications are
// reliable (LISTEN live); when they may have been missed, everything is forgotten and polls read
// the database again.
//
// A poll's read and the announcement of the job's end may cross: a job announced final shortly
// before a read of it returns is not remembered (finished jobs of the last minute are kept
// apart for that). Where the job stands in its model's queue (its position, an estimate of the
// wait) is refreshed for the jobs being polled, once a second, in one statement for all of them.
//
// The poll that ends the wait costs no statement either when this server's own statement
// finished the job as done (the lifecycle's local outcome carries the answer, committed): a
// polled job's answer is kept until its owner reads it, for a minute at most, within a budget
// of jobs and bytes. A job done is final, so this needs no trust in notifications; a job
// finished on another server, or failed, expired or canceled, is read as before.
import type { DoneJob, Outcome } from './outcome.js';
import type { LiveConsumer } from './lifecycle.js';
import type { JobStanding } from './sql/standings.js';
import type { Throughput } from './throughput.js';

/** What a poll of an open job is told (GET /get_result's 404 body, beside `detail`). */
export interface Standing {
  state: 'queued' | 'leased';
  /** Jobs ahead of it in its model's queue (0 when leased); absent until known. */
  position?: number;
  /** Seconds until a node is likely to take it (0 when leased), from the model's recent throughput; null when unknown. */
  eta_seconds?: number | null;
}

interface Entry {
  owner: number;
  state: 'queued' | 'leased';
  model?: number;
  position?: number;
  polledAt: number;
  /** Its owner polls it (GET /get_result without wait): keep its answer when it is done here. */
  polled: boolean;
}

/** A done job's answer kept for its owner's next poll. */
interface Done {
  owner: number;
  job: DoneJob;
  bytes: number;
  at: number;
}

/** Where open jobs stand, for many at once (one statement, sql/standings.ts). */
export type StandingsOf = (jobIds: string[]) => Promise<Map<string, JobStanding>>;

const MAX_JOBS = 200_000;
const RECENT_MS = 60_000;
const REFRESH_MS = 1_000;
/** Answers kept for polls: at most this many, and this many bytes of answer text. */
const MAX_DONE = 20_000;
const MAX_DONE_BYTES = 32 * 1024 * 1024;

export class OpenJobs implements LiveConsumer {
  private readonly jobs = new Map<string, Entry>();
  /** Done jobs' answers for their pollers, oldest first. */
  private readonly done = new Map<string, Done>();
  private doneBytes = 0;
  /** Jobs announced final lately, in two generations: a read that began before the announcement must not bring them back. */
  private recentFinal = new Set<string>();
  private olderFinal = new Set<string>();
  private rotatedAt = 0;
  private live = false;
  private readonly timer: NodeJS.Timeout;
  private refreshing: Promise<void> | undefined;

  constructor(
    private readonly standings: StandingsOf,
    private readonly pace: Throughput,
    private readonly onError: (err: unknown) => void,
    private readonly now: () => number = Date.now,
  ) {
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
    this.timer.unref();
  }

  /** The job is open, as far as this server knows (undefined: read it). */
  get(jobId: string, owner: number): Standing | undefined {
    const e = this.known(jobId, owner);
    if (!e) return undefined;
    e.polledAt = this.now();
    e.polled = true;
    return this.standing(e);
  }

  /** As get, for a waiter rather than a poll: its answer comes with the wake-up (jobs/watch.ts), so it is not kept for a poll. */
  peek(jobId: string, owner: number): Standing | undefined {
    const e = this.known(jobId, owner);
    return e && this.standing(e);
  }

  /** The owner's job as known to be open, while announcements are trusted. */
  private known(jobId: string, owner: number): Entry | undefined {
    if (!this.live) return undefined;
    const e = this.jobs.get(jobId);
    return e?.owner === owner ? e : undefined;
  }

  /** The answer of a job this server finished as done, for its owner's poll (once); undefined: read the job. */
  takeDone(jobId: string, owner: number): DoneJob | undefined {
    const d = this.done.get(jobId);
    if (!d || d.owner !== owner) return undefined;
    this.forget(jobId, d);
    return d.job;
  }

  /**
   * The job was seen open (submitted here, or read open by a poll: `polled`); answers what a
   * poll is told.
   */
  remember(jobId: string, owner: number, seen: { state: 'queued' | 'leased'; model?: number; position?: number }, polled = false): Standing {
    const e: Entry = { ...seen, owner, polledAt: this.now(), polled };
    if (this.live && !this.recentFinal.has(jobId) && !this.olderFinal.has(jobId)) {
      if (this.jobs.size >= MAX_JOBS) this.jobs.delete(this.jobs.keys().next().value!);
      this.jobs.set(jobId, e);
    }
    return this.standing(e);
  }

  private standing(e: Entry): Standing {
    if (e.state === 'leased') return { state: 'leased', position: 0, eta_seconds: 0 };
    if (e.position === undefined || e.model === undefined) return { state: e.state };
    return { state: e.state, position: e.position, eta_seconds: this.pace.eta(e.model, e.position) };
  }

  apply(o: Outcome): void {
    if (o.finished.size > 0) {
      this.rotate();
      this.expireDone();
      for (const id of o.finished.keys()) {
        const e = this.jobs.get(id);
        const answer = o.local?.done?.get(id);
        if (e?.polled && answer) this.keepDone(id, e.owner, answer);
        this.jobs.delete(id);
        this.recentFinal.add(id);
      }
    }
    for (const id of o.requeuedLeases.keys()) {
      const e = this.jobs.get(id);
      if (e) {
        e.state = 'queued';
        e.position = undefined;
      }
    }
  }

  setLive(live: boolean): void {
    this.live = live;
    if (!live) this.jobs.clear();
  }

  close(): void {
    clearInterval(this.timer);
  }

  get size(): number {
    return this.jobs.size;
  }

  /** Answers kept for polls (for tests). */
  get doneSize(): number {
    return this.done.size;
  }

  private keepDone(jobId: string, owner: number, job: DoneJob): void {
    const bytes = job.result.message.content.length * 2 + 256;
    if (bytes > MAX_DONE_BYTES / 16) return;
    while (this.done.size > 0 && (this.done.size >= MAX_DONE || this.doneBytes + bytes > MAX_DONE_BYTES)) {
      const [oldest, d] = this.done.entries().next().value!;
      this.forget(oldest, d);
    }
    this.done.set(jobId, { owner, job, bytes, at: this.now() });
    this.doneBytes += bytes;
  }

  private forget(jobId: string, d: Done): void {
    this.done.delete(jobId);
    this.doneBytes -= d.bytes;
  }

  /** Answers nobody came for within a minute are dropped (a later poll reads the job). */
  private expireDone(): void {
    const before = this.now() - RECENT_MS;
    for (const [id, d] of this.done) {
      if (d.at >= before) break;
      this.forget(id, d);
    }
  }

  private rotate(): void {
    const now = this.now();
    if (now - this.rotatedAt < RECENT_MS) return;
    this.olderFinal = this.recentFinal;
    this.recentFinal = new Set();
    this.rotatedAt = now;
  }

  /** Where the jobs polled lately stand: one statement for all of them, at most once a second. */
  private refresh(): void {
    if (this.refreshing || !this.live) return;
    const since = this.now() - 5 * REFRESH_MS;
    const ids = [...this.jobs].filter(([, e]) => e.polledAt >= since).map(([id]) => id);
    if (ids.length === 0) return;
    this.refreshing = this.standings(ids)
      .then((found) => {
        for (const id of ids) {
          const e = this.jobs.get(id);
          const s = found.get(id);
          // Not open any more (its end announced meanwhile, or missed): the next poll reads it.
          if (!s) this.jobs.delete(id);
          else if (e) Object.assign(e, s);
        }
      }, this.onError)
      .finally(() => {
        this.refreshing = undefined;
      });
  }
}
