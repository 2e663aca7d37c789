// Partial output while a node generates (ours): a worker sends the text of a streamed job as
// it comes (POST /worker/job_progress), and whoever streams that job to a client hears it —
// on this server directly, on another through PROGRESS_CHANNEL. Nothing is stored: the final
// report is the answer of record; progress only lets a streaming client see it early.
import { sql, type Queryable } from '../db/database.js';

export const PROGRESS_CHANNEL = 'ins_progress';
// NOTIFY payloads are at most 8000 bytes; a character takes at most 4 in UTF-8.
const PIECE = 1_800;

const NOTIFY = sql('jobs_progress_notify', `SELECT pg_notify('${PROGRESS_CHANNEL}', $1::text) AS sent`);
// $1 the job key's hash, $2 the job id: the lease is open, for that job.
const OPEN_LEASE = sql('jobs_progress_lease', `SELECT 1 AS open FROM job_leases
  WHERE key_hash = $1::text AND ended_at IS NULL AND job_id::text = $2::text`);

export class ProgressRelay {
  private readonly listeners = new Map<string, Set<(delta: string) => void>>();
  /** Leases seen open (key hash → job id), so a stream of chunks costs one check. */
  private readonly open = new Map<string, string>();

  constructor(private readonly db: Queryable, private readonly server: string) {}

  /** Hears the job's partial output; returns the unsubscribe function. */
  listen(jobId: string, fn: (delta: string) => void): () => void {
    let set = this.listeners.get(jobId);
    if (!set) this.listeners.set(jobId, (set = new Set()));
    set.add(fn);
    return () => {
      set.delete(fn);
      if (set.size === 0 && this.listeners.get(jobId) === set) this.listeners.delete(jobId);
    };
  }

  /** A worker's partial output for the job of an open lease; false when that lease is not open. */
  async publish(keyHash: string, jobId: string, delta: string): Promise<boolean> {
    if (this.open.get(keyHash) !== jobId) {
      if ((await this.db.query(OPEN_LEASE, [keyHash, jobId])).length === 0) return false;
      if (this.open.size >= 10_000) this.open.delete(this.open.keys().next().value!);
      this.open.set(keyHash, jobId);
    }
    if (delta.length === 0) return true;
    if (this.listeners.has(jobId)) return this.deliver(jobId, delta), true;
    // Nobody streams it here: perhaps on another server.
    for (let i = 0; i < delta.length; i += PIECE) await this.db.query(NOTIFY, [`${this.server} ${jobId} ${delta.slice(i, i + PIECE)}`]);
    return true;
  }

  /** These jobs' leases ended here: their keys are checked again (and refused) from now on. */
  ended(jobIds: Iterable<string>): void {
    const gone = new Set(jobIds);
    if (gone.size === 0 || this.open.size === 0) return;
    for (const [hash, jobId] of this.open) if (gone.has(jobId)) this.open.delete(hash);
  }

  /** A PROGRESS_CHANNEL payload from any server. */
  heard(payload: string): void {
    const [server, jobId] = payload.split(' ', 2);
    if (server === this.server || !jobId) return;
    this.deliver(jobId, payload.slice(server!.length + jobId.length + 2));
  }

  private deliver(jobId: string, delta: string): void {
    for (const fn of [...(this.listeners.get(jobId) ?? [])]) fn(delta);
  }
}
