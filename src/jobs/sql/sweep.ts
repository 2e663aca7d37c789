// Transition: expiry (leased → queued or failed; queued|leased → expired; queued → failed), without a timer per
// job: every SWEEP_INTERVAL one server — the one that gets the advisory lock, so one at a time
// across servers — ends the leases past their end (their time was up: a failed attempt; the job
// goes back to the queue with what it streamed kept, or fails after MAX_ATTEMPTS) and expires
// the open jobs past their deadline, and fails the queued jobs no node may take any more.
// jobs/sweeper.ts runs it.
import { sql, type Database } from '../../db/database.js';
import { servingSession } from '../../db/rules/live.js';
import { parseItems, type Outcome } from '../outcome.js';
import { requeueOrFail } from './requeue.js';

// Any constant shared by all servers: "ins_sw" in ASCII.
export const LOCK_KEY = 0x696e735f7377;
export const TRY_LOCK = sql('sweep_try_lock', `SELECT pg_try_advisory_xact_lock(${LOCK_KEY}) AS got`);

// $1 MAX_ATTEMPTS, $2 this server's id. A lease ends before its job changes (the lock order of
// sql/lease.ts); `requeued` and `late` touch disjoint jobs: a lease past the job's deadline
// ends as 'deadline' and its job expires with the queued ones. A lease that ran out is its
// node's fault, as an error report is (sql/complete.ts): its job is requeued or failed by the
// one rule of both (sql/requeue.ts), and the node's failure is counted against it
// (verify/failures.ts).
export const SWEEP = sql(
  'sweep',
  `WITH ended AS (
  UPDATE job_leases l SET ended_at = now(), outcome = CASE WHEN j.deadline_at <= now() THEN 'deadline' ELSE 'expired' END
  FROM jobs j WHERE l.ended_at IS NULL AND l.expires_at <= now() AND j.id = l.job_id
  RETURNING l.job_id, l.node_id, l.outcome, l.attempt, l.prefix || l.partial AS streamed
),
${requeueOrFail('ended', "e.outcome = 'expired'", '$1::int')},
-- A job some node failed fails when no node that may take it remains (issue 29): no live session
-- ($3 the online window, $4 MODELS_TTL) of a node that serves its model, declared the
-- capabilities it needs, is not suspended and did not fail it (exclude_nodes). Only after $5
-- seconds (NO_NODE_GRACE) since its last lease ended: a worker whose backend crashed reports
-- an error, and the node that takes the job over may start a moment later. Through the partial
-- index jobs_queued_failed (migrations/0019), only queued jobs with a failure are looked at.
-- A user's job whose only nodes left are ones it was kept from because their leases ran out
-- (never an error report, never a give-up) goes back to them instead (readmitted): a worker
-- killed mid-job and started again is the node's one way to finish it, where failing it would
-- leave its user nothing. MAX_ATTEMPTS still bounds it. Checks and probes keep their exclusions.
waiting AS (
  SELECT j.id, j.model_id, j.kind, j.needs, j.exclude_nodes FROM jobs j
  WHERE j.state = 'queued' AND j.failures > 0 AND j.deadline_at > now()
    AND NOT EXISTS (SELECT 1 FROM job_leases l WHERE l.job_id = j.id AND l.ended_at > now() - make_interval(secs => $5::float8))
),
-- The nodes that could serve each: a live session that serves its model with the capabilities it needs, not suspended.
servers AS (
  SELECT DISTINCT x.id, s.node_id, s.node_id = ANY(x.exclude_nodes) AS excluded
  FROM waiting x JOIN node_sessions s ON true JOIN nodes n ON n.id = s.node_id CROSS JOIN LATERAL unnest(s.models, s.model_caps) AS d(model_id, caps)
  WHERE d.model_id = x.model_id AND x.needs & ~coalesce(d.caps, 0) = 0 AND ${servingSession('s', 'n', '$3', '$4')}
),
stranded_jobs AS (
  SELECT x.id, x.kind FROM waiting x WHERE NOT EXISTS (SELECT 1 FROM servers v WHERE v.id = x.id AND NOT v.excluded)
),
-- Every server of a stranded job is excluded from it: those that only let a lease run out.
readmissible AS (
  SELECT x.id, array_agg(v.node_id) AS nodes FROM stranded_jobs x JOIN servers v ON v.id = x.id
  WHERE x.kind = 'user'
    AND NOT EXISTS (SELECT 1 FROM job_leases l WHERE l.job_id = x.id AND l.node_id = v.node_id AND l.outcome IS DISTINCT FROM 'expired')
  GROUP BY x.id
),
readmitted AS (
  UPDATE jobs j SET exclude_nodes = ARRAY(SELECT e FROM unnest(j.exclude_nodes) AS e WHERE NOT (e = ANY(r.nodes)))
  FROM readmissible r WHERE j.id = r.id AND j.state = 'queued'
  RETURNING j.id, j.model_id
),
stranded AS (
  UPDATE jobs j SET state = 'failed', finished_at = now(), detail = 'no node that may take it remains',
    node_id = NULL, lease_expires_at = NULL, streamed = ''
  FROM stranded_jobs x WHERE j.id = x.id AND j.state = 'queued' AND NOT EXISTS (SELECT 1 FROM readmissible r WHERE r.id = x.id)
  RETURNING j.id, j.model_id
),
late AS (
  UPDATE jobs j SET state = 'expired', finished_at = now(), detail = 'the deadline passed before a node finished it',
    node_id = NULL, lease_expires_at = NULL, streamed = ''
  WHERE j.state IN ('queued', 'leased') AND j.deadline_at <= now()
  RETURNING j.id, j.model_id
),
final AS (
  SELECT id, state, model_id FROM requeued WHERE state = 'failed'
  UNION ALL SELECT id, 'expired', model_id FROM late
  UNION ALL SELECT id, 'failed', model_id FROM stranded
),
-- The tokens failed and expired jobs reserved of their owners' daily quotas are given back by
-- the settler (src/usage/sql.ts), not here.
announced AS (
  SELECT jobs_announce($2::text,
    ARRAY(SELECT model_id FROM requeued WHERE state = 'queued' AND verify_of IS NULL) || ARRAY(SELECT model_id FROM readmitted), ARRAY(SELECT model_id FROM requeued WHERE state = 'queued' AND verify_of IS NOT NULL),
    ARRAY(SELECT id FROM final), ARRAY(SELECT state FROM final), ARRAY(SELECT model_id FROM final),
    ARRAY(SELECT id FROM requeued WHERE state = 'queued'), ARRAY(SELECT attempt FROM requeued WHERE state = 'queued')) AS items
)
SELECT a.items AS announced, (SELECT count(*)::int FROM ended) AS leases_ended,
  coalesce((SELECT json_agg(json_build_object('nodeId', node_id, 'jobId', id)) FROM requeued), '[]') AS failures
FROM announced a`,
);

// Before the sweep: the time since the last one ended ($1 seconds at least: longer than any
// sweep's own delay) was time no server swept — the service or its database was down — and no
// node could report or renew. Each lease open at the last sweep gets it back (migrations/0026);
// one taken since (a server that starts after a long stop leases at once) has lost nothing.
// The clock is the last sweep's end (TICK, after it): a slow sweep is no gap, since the next
// one starts only after it (jobs/sweeper.ts).
export const PAUSE = sql(
  'sweep_pause',
  `WITH t AS (
  SELECT extract(epoch FROM now() - swept_at)::float8 AS gap, swept_at AS since FROM sweep_clock FOR UPDATE
)
UPDATE job_leases l SET expires_at = least(j.deadline_at, l.expires_at + make_interval(secs => t.gap)), paused_seconds = l.paused_seconds + t.gap
FROM t, jobs j
WHERE t.gap > $1::float8 AND l.ended_at IS NULL AND l.leased_at <= t.since AND l.expires_at > t.since AND j.id = l.job_id`,
);
export const TICK = sql('sweep_tick', `UPDATE sweep_clock SET swept_at = greatest(swept_at, clock_timestamp())`);

/** The gap between sweeps past which it is given back to leases (PAUSE): longer than a sweep's delay on a loaded machine, five intervals and at least 5 s. */
export const pauseAfter = (sweepIntervalSeconds: number): number => Math.max(5, 5 * sweepIntervalSeconds);

/** When a queued job some node failed has no node left that may take it (seconds). */
export interface Stranding {
  onlineWindow: number;
  modelsTtl: number;
  grace: number;
}

/**
 * One sweep, if this server gets the lock; undefined when another server is sweeping. `pauseAfter`
 * (seconds): a longer time since the last sweep is given back to the leases open then (PAUSE).
 */
export async function sweep(
  db: Database,
  maxAttempts: number,
  server: string,
  stranding: Stranding,
  pauseAfter: number,
): Promise<Outcome | undefined> {
  return db.transaction(async (tx) => {
    const [lock] = await tx.query<{ got: boolean }>(TRY_LOCK);
    if (!lock!.got) return undefined;
    await tx.query(PAUSE, [pauseAfter]);
    const [r] = await tx.query<{ announced: string; leases_ended: number; failures: { nodeId: number; jobId: string }[] }>(SWEEP, [
      maxAttempts,
      server,
      stranding.onlineWindow,
      stranding.modelsTtl,
      stranding.grace,
    ]);
    await tx.query(TICK);
    const o = parseItems(r!.announced);
    if (r!.leases_ended > 0) o.local = { leasesExpired: r!.leases_ended };
    if (r!.failures.length > 0) o.local = { ...o.local, nodeFailures: r!.failures.map((f) => ({ nodeId: Number(f.nodeId), jobId: f.jobId })) };
    return o;
  });
}
