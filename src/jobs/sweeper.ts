// Lease expiry and deadlines without a timer per job: every SWEEP_INTERVAL one server — the
// one that gets the advisory lock, so exactly one across several servers — ends the leases
// past their end (the job goes back to the queue, or fails after MAX_ATTEMPTS) and expires
// the open jobs past their deadline.
import { sql, type Database } from '../db/database.js';
import { JOBS_CHANNEL, modelCounts, RESULTS_CHANNEL } from './channels.js';

// Any constant shared by all servers: "ins_sw" in ASCII.
const LOCK_KEY = 0x696e735f7377;
const TRY_LOCK = sql('sweep_try_lock', `SELECT pg_try_advisory_xact_lock(${LOCK_KEY}) AS got`);

// $1 MAX_ATTEMPTS, $2 this server's id. A lease ends before its job changes (the lock order
// of jobs/lease.ts); `ended` and `late` touch disjoint jobs: a lease past the job's deadline
// ends as 'deadline' and its job expires with the queued ones.
const SWEEP = sql('sweep', `WITH ended AS (
  UPDATE job_leases l SET ended_at = now(), outcome = CASE WHEN j.deadline_at <= now() THEN 'deadline' ELSE 'expired' END
  FROM jobs j WHERE l.ended_at IS NULL AND l.expires_at <= now() AND j.id = l.job_id
  RETURNING l.job_id, l.outcome
),
requeued AS (
  UPDATE jobs j SET
    state = CASE WHEN j.attempts >= $1::int THEN 'failed' ELSE 'queued' END,
    finished_at = CASE WHEN j.attempts >= $1::int THEN now() END,
    detail = CASE WHEN j.attempts >= $1::int THEN 'no node finished it in ' || $1::int || ' attempts' END,
    node_id = NULL, lease_expires_at = NULL
  FROM ended e WHERE j.id = e.job_id AND e.outcome = 'expired' AND j.state = 'leased'
  RETURNING j.id, j.state, j.model_id
),
late AS (
  UPDATE jobs j SET state = 'expired', finished_at = now(), detail = 'the deadline passed before a node finished it',
    node_id = NULL, lease_expires_at = NULL
  WHERE j.state IN ('queued', 'leased') AND j.deadline_at <= now()
  RETURNING j.id
),
queued AS (SELECT string_agg(model_id || ':' || n, ',') AS items FROM (SELECT model_id, count(*) AS n FROM requeued WHERE state = 'queued' GROUP BY model_id) c),
final AS (SELECT string_agg(id::text, ',') AS items FROM (SELECT id FROM requeued WHERE state = 'failed' UNION ALL SELECT id FROM late) f),
told AS (
  SELECT pg_notify('${JOBS_CHANNEL}', $2::text || ' ' || items) FROM queued WHERE items IS NOT NULL
  UNION ALL
  SELECT pg_notify('${RESULTS_CHANNEL}', $2::text || ' ' || items) FROM final WHERE items IS NOT NULL)
SELECT (SELECT count(*)::int FROM ended) AS leases_ended, (SELECT count(*)::int FROM late) AS expired,
  (SELECT count(*)::int FROM requeued WHERE state = 'failed') AS failed,
  coalesce((SELECT items FROM queued), '') AS queued, coalesce((SELECT items FROM final), '') AS final,
  (SELECT count(*)::int FROM told) AS told`);

export interface SweepResult { leasesEnded: number; expired: number; failed: number; queued: Map<number, number>; finished: string[] }

/** One sweep, if this server gets the lock; undefined when another server is sweeping. */
export async function sweep(db: Database, maxAttempts: number, server: string): Promise<SweepResult | undefined> {
  return db.transaction(async (tx) => {
    const [lock] = await tx.query<{ got: boolean }>(TRY_LOCK);
    if (!lock!.got) return undefined;
    const [r] = await tx.query<{ leases_ended: number; expired: number; failed: number; queued: string; final: string }>(SWEEP, [maxAttempts, server]);
    return { leasesEnded: r!.leases_ended, expired: r!.expired, failed: r!.failed, queued: modelCounts(r!.queued.split(',').filter(Boolean)), finished: r!.final.split(',').filter(Boolean) };
  });
}

export class Sweeper {
  private readonly timer: NodeJS.Timeout;
  private running: Promise<void> | undefined;

  constructor(db: Database, intervalMs: number, maxAttempts: number, server: string, onSwept: (r: SweepResult) => void, onError: (err: unknown) => void) {
    this.timer = setInterval(() => {
      this.running ??= sweep(db, maxAttempts, server)
        .then((r) => { if (r) onSwept(r); }, onError)
        .finally(() => { this.running = undefined; });
    }, intervalMs);
    this.timer.unref();
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }
}
