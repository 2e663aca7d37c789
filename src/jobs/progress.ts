// Partial output while a node generates (POST /worker/job_progress): the text of a streamed job
// is kept with its lease (sql/progress.ts) and relayed to whoever streams that job to its
// client — on this server directly, on another through PROGRESS_CHANNEL. Each piece carries its
// place in the whole answer (`at`, in characters, the prefix an earlier attempt streamed
// included), so a stream can tell text that continues what it sent from text it cannot place.
// A lease that has ended takes nothing: the worker is told (its job was canceled, expired or
// finished elsewhere) and nothing of it reaches the client.
//
// Heartbeats (progress without text) cost no statement for a lease this server knows is open:
// leases are remembered once checked, and forgotten when the lifecycle says their job was
// requeued or finished (outcomes, here or announced by another server) — trusted only while
// notifications are reliable (LISTEN live), as the dispatcher trusts its memory.
//
// Progress also keeps its lease alive (HEARTBEAT_TIMEOUT, config.ts): a lease that hears from its
// worker ends HEARTBEAT_TIMEOUT after the last renewal, so a dead worker's job goes back to the
// queue in seconds. A lease is renewed at most every third of that per server, by the statement
// that checks the lease or keeps the piece (sql/progress.ts KEEP_PROGRESS), else by one of its own.
import { sql, type Queryable } from '../db/database.js';
import { keepProgress, openLeaseAttempt, renewLease, type Kept } from './sql/progress.js';
import type { Outcome } from './outcome.js';
import type { LiveConsumer } from './lifecycle.js';

export const PROGRESS_CHANNEL = 'ins_progress';
/** Most characters of partial output a lease keeps and relays; the rest of the answer reaches the client with the report. */
export const PROGRESS_CAP_CHARS = 65_536;
// NOTIFY payloads are at most 8000 bytes; a character takes at most 4 in UTF-8.
const PIECE_CHARS = 1_800;
const MAX_REMEMBERED = 100_000;

const NOTIFY = sql('jobs_progress_notify', `SELECT pg_notify('${PROGRESS_CHANNEL}', $1::text) AS sent`);

/** A piece of a streamed job's answer: from the lease of `attempt`, starting at character `at` of the whole answer. */
export interface Piece {
  attempt: number;
  at: number;
  text: string;
}

/** Characters (code points), as PostgreSQL counts them. */
export const charLength = (s: string): number => {
  let n = 0;
  for (const _ of s) n++;
  return n;
};

export class ProgressRelay implements LiveConsumer {
  private readonly listeners = new Map<string, Set<(p: Piece) => void>>();
  /** Leases known open: job key hash → job id, and the reverse, to forget them by job. */
  private readonly open = new Map<string, string>();
  private readonly byJob = new Map<string, string>();
  /** Checks running, per job: an outcome for the job meanwhile makes their answer stale (not remembered). */
  private readonly checking = new Map<string, { stale: boolean }>();
  private live = false;
  /** When each lease (job key hash) was last renewed here, performance.now() ms. */
  private readonly renewed = new Map<string, number>();

  /** `leases`: LEASE_TIMEOUT and HEARTBEAT_TIMEOUT in seconds (heartbeat 0: progress renews nothing). */
  constructor(
    private readonly db: Queryable,
    private readonly server: string,
    private readonly leases: { lease: number; heartbeat: number } = { lease: 0, heartbeat: 0 },
  ) {}

  /** Whether this server should renew the lease now: a third of HEARTBEAT_TIMEOUT has passed since it last did (and marks it renewed). */
  private renewDue(keyHash: string): boolean {
    const { heartbeat } = this.leases;
    if (heartbeat <= 0) return false;
    const now = performance.now();
    const last = this.renewed.get(keyHash);
    if (last !== undefined && now - last < (heartbeat * 1000) / 3) return false;
    if (this.renewed.size >= MAX_REMEMBERED) this.renewed.delete(this.renewed.keys().next().value!);
    this.renewed.delete(keyHash);
    this.renewed.set(keyHash, now);
    return true;
  }

  /** Renews the lease when due (a heartbeat of a lease known open: no other statement). */
  private async renew(keyHash: string): Promise<void> {
    if (!this.renewDue(keyHash)) return;
    // Best effort: a renewal that fails (a database blip) fails no progress; the next heartbeat tries again.
    await renewLease(this.db, keyHash, this.leases.lease, this.leases.heartbeat).catch(() => {
      this.renewed.delete(keyHash);
    });
  }

  /** Hears the job's partial output; returns the unsubscribe function. */
  listen(jobId: string, fn: (p: Piece) => void): () => void {
    let set = this.listeners.get(jobId);
    if (!set) this.listeners.set(jobId, (set = new Set()));
    set.add(fn);
    return () => {
      set.delete(fn);
      if (set.size === 0 && this.listeners.get(jobId) === set) this.listeners.delete(jobId);
    };
  }

  /** A worker's partial output (empty: a heartbeat); false when the lease is not open (ended, or not this job's). */
  async publish(keyHash: string, jobId: string, text: string): Promise<boolean> {
    if (text === '' && this.live && this.open.get(keyHash) === jobId) {
      await this.renew(keyHash);
      return true;
    }
    return this.relay(keyHash, jobId, text);
  }

  private async relay(keyHash: string, jobId: string, text: string): Promise<boolean> {
    const check = { stale: false };
    this.checking.set(jobId, check);
    let kept: Kept | undefined;
    // The renewal, when due, goes with the statement that checks the lease or keeps the text: one
    // statement for a piece, not two in turn (the first piece of a lease is always due).
    const renew = this.renewDue(keyHash);
    try {
      kept =
        text === '' && !renew
          ? await openLeaseAttempt(this.db, keyHash, jobId).then((attempt) => (attempt === undefined ? undefined : { attempt, at: 0, kept: 0 }))
          : await keepProgress(this.db, keyHash, jobId, text, PROGRESS_CAP_CHARS, renew ? this.leases : undefined);
    } catch (err) {
      if (renew) this.renewed.delete(keyHash);
      throw err;
    } finally {
      if (this.checking.get(jobId) === check) this.checking.delete(jobId);
    }
    if (!kept) return (this.forgetKey(keyHash), false);
    if (!check.stale) this.remember(keyHash, jobId);
    if (kept.kept === 0) return true;
    const chars = Array.from(text).slice(0, kept.kept);
    const piece: Piece = { attempt: kept.attempt, at: kept.at, text: chars.length === text.length ? text : chars.join('') };
    if (this.listeners.has(jobId)) {
      this.deliver(jobId, piece);
      return true;
    }
    // Nobody streams it here: perhaps on another server.
    for (let i = 0; i < chars.length; i += PIECE_CHARS) {
      await this.db.query(NOTIFY, [`${this.server} ${jobId} ${piece.attempt} ${piece.at + i} ${chars.slice(i, i + PIECE_CHARS).join('')}`]);
    }
    return true;
  }

  /** Jobs requeued or finished: their leases are no longer open. */
  apply(o: Outcome): void {
    for (const id of o.requeuedLeases.keys()) this.forgetJob(id);
    for (const id of o.finished.keys()) this.forgetJob(id);
  }

  setLive(live: boolean): void {
    this.live = live;
    if (!live) {
      this.open.clear();
      this.byJob.clear();
      for (const check of this.checking.values()) check.stale = true;
    }
  }

  /** A PROGRESS_CHANNEL payload from any server. */
  heard(payload: string): void {
    const [server, jobId, attempt, at] = payload.split(' ', 4);
    if (server === this.server || !jobId || attempt === undefined || at === undefined || !this.listeners.has(jobId)) return;
    const head = `${server} ${jobId} ${attempt} ${at} `;
    this.deliver(jobId, { attempt: Number(attempt), at: Number(at), text: payload.slice(head.length) });
  }

  private remember(keyHash: string, jobId: string): void {
    if (this.open.size >= MAX_REMEMBERED) {
      const [oldKey, oldJob] = this.open.entries().next().value!;
      this.open.delete(oldKey);
      this.byJob.delete(oldJob);
    }
    this.open.set(keyHash, jobId);
    this.byJob.set(jobId, keyHash);
  }

  private forgetKey(keyHash: string): void {
    const jobId = this.open.get(keyHash);
    this.open.delete(keyHash);
    this.renewed.delete(keyHash);
    if (jobId !== undefined && this.byJob.get(jobId) === keyHash) this.byJob.delete(jobId);
  }

  private forgetJob(jobId: string): void {
    const check = this.checking.get(jobId);
    if (check) check.stale = true;
    const key = this.byJob.get(jobId);
    if (key !== undefined) this.forgetKey(key);
  }

  private deliver(jobId: string, piece: Piece): void {
    for (const fn of [...(this.listeners.get(jobId) ?? [])]) fn(piece);
  }
}
