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
import type { Outcome } from './outcome.js';
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

interface Entry { owner: number; state: 'queued' | 'leased'; model?: number; position?: number; polledAt: number }

/** Where open jobs stand, for many at once (one statement, sql/standings.ts). */
export type StandingsOf = (jobIds: string[]) => Promise<Map<string, JobStanding>>;

const MAX_JOBS = 200_000;
const RECENT_MS = 60_000;
const REFRESH_MS = 1_000;

export class OpenJobs implements LiveConsumer {
  private readonly jobs = new Map<string, Entry>();
  /** Jobs announced final lately, in two generations: a read that began before the announcement must not bring them back. */
  private recentFinal = new Set<string>();
  private olderFinal = new Set<string>();
  private rotatedAt = 0;
  private live = false;
  private readonly timer: NodeJS.Timeout;
  private refreshing: Promise<void> | undefined;

  constructor(private readonly standings: StandingsOf, private readonly pace: Throughput, private readonly onError: (err: unknown) => void, private readonly now: () => number = Date.now) {
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
    this.timer.unref();
  }

  /** The job is open, as far as this server knows (undefined: read it). */
  get(jobId: string, owner: number): Standing | undefined {
    if (!this.live) return undefined;
    const e = this.jobs.get(jobId);
    if (!e || e.owner !== owner) return undefined;
    e.polledAt = this.now();
    return this.standing(e);
  }

  /** The job was seen open (submitted here, or read open by a poll); answers what a poll is told. */
  remember(jobId: string, owner: number, seen: { state: 'queued' | 'leased'; model?: number; position?: number }): Standing {
    const e: Entry = { ...seen, owner, polledAt: this.now() };
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
      for (const id of o.finished.keys()) {
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
    this.refreshing = this.standings(ids).then((found) => {
      for (const id of ids) {
        const e = this.jobs.get(id);
        const s = found.get(id);
        // Not open any more (its end announced meanwhile, or missed): the next poll reads it.
        if (!s) this.jobs.delete(id);
        else if (e) Object.assign(e, s);
      }
    }, this.onError).finally(() => { this.refreshing = undefined; });
  }
}
