// Transition: release (leased → queued) — a node gives a lease up: its worker deregistered
// (`released`), asked for more jobs than its session can hold (`abandoned`: it gave up its
// oldest), its node was disabled (`released`), or it hung up before the job reached it (the
// lease is undone: it never was an attempt). A give-up is no failure of the job: the job goes
// back to the queue whatever its attempts, with the text already streamed to its client kept as
// the answer's beginning for the next node. The first give-up is nobody's fault (a clean
// shutdown hands the job back); a node that gives up a job it gave up before makes it its own:
// it does not get it back (exclude_nodes), and the repeat is told (it counts against the node).
import { sql, type Queryable } from '../../db/database.js';
import { parseItems, type Outcome } from '../outcome.js';

// The leases: those with the given key hashes ($1), the oldest $4 open ones of session $2, or
// every open one of node $3's sessions. $5 the outcome; $6 true when the lease never reached the
// worker: its row goes (the next lease takes its attempt number, and (job_id, attempt) is
// unique); $7 this server's id.
export const RELEASE = sql(
  'jobs_release',
  `WITH chosen AS (
  SELECT key_hash FROM job_leases
  WHERE ended_at IS NULL AND (key_hash = ANY($1::text[]) OR session_id = $2::bigint OR node_id = $3::bigint)
  ORDER BY leased_at LIMIT $4::int
),
kept AS (
  UPDATE job_leases l SET ended_at = now(), outcome = $5::text
  FROM chosen c WHERE l.key_hash = c.key_hash AND l.ended_at IS NULL AND NOT $6::boolean
  RETURNING l.key_hash, l.job_id, l.node_id, l.attempt, l.prefix || l.partial AS streamed
),
dropped AS (
  DELETE FROM job_leases l USING chosen c WHERE l.key_hash = c.key_hash AND l.ended_at IS NULL AND $6::boolean
  RETURNING l.key_hash, l.job_id, l.node_id, l.attempt, l.prefix || l.partial AS streamed
),
ended AS (SELECT * FROM kept UNION ALL SELECT * FROM dropped),
repeated AS (
  SELECT e.job_id, e.node_id FROM kept e WHERE EXISTS (
    SELECT 1 FROM job_leases p WHERE p.job_id = e.job_id AND p.node_id = e.node_id AND p.key_hash <> e.key_hash AND p.outcome IN ('released', 'abandoned'))
),
back AS (
  UPDATE jobs j SET state = 'queued', node_id = NULL, lease_expires_at = NULL, streamed = e.streamed,
    attempts = j.attempts - CASE WHEN $6::boolean THEN 1 ELSE 0 END,
    exclude_nodes = CASE WHEN r.node_id IS NULL THEN j.exclude_nodes ELSE j.exclude_nodes || r.node_id END
  FROM ended e LEFT JOIN repeated r ON r.job_id = e.job_id
  WHERE j.id = e.job_id AND j.state = 'leased'
  RETURNING j.id, j.model_id, j.verify_of, e.attempt
),
announced AS (
  SELECT jobs_announce($7::text, ARRAY(SELECT model_id FROM back WHERE verify_of IS NULL), ARRAY(SELECT model_id FROM back WHERE verify_of IS NOT NULL),
    '{}', '{}', '{}', ARRAY(SELECT id FROM back), ARRAY(SELECT attempt FROM back)) AS items
)
SELECT a.items AS announced, coalesce((SELECT json_agg(json_build_object('nodeId', node_id, 'jobId', job_id)) FROM repeated), '[]') AS repeated
FROM announced a`,
);

export interface ReleaseWhich {
  keyHashes?: string[];
  sessionId?: number;
  nodeId?: number;
  most?: number;
}
export type GiveUp = 'released' | 'abandoned';

/** Ends the chosen open leases as given up (`undelivered`: undone, no attempt); their jobs go back to the queue. */
export async function releaseLeases(db: Queryable, which: ReleaseWhich, outcome: GiveUp, undelivered: boolean, server: string): Promise<Outcome> {
  const [row] = await db.query<{ announced: string; repeated: { nodeId: number; jobId: string }[] }>(RELEASE, [
    which.keyHashes ?? [],
    which.sessionId ?? null,
    which.nodeId ?? null,
    which.most ?? 1_000_000,
    outcome,
    undelivered,
    server,
  ]);
  const o = parseItems(row!.announced);
  if (row!.repeated.length > 0) o.local = { repeatGiveUps: row!.repeated.map((r) => ({ nodeId: Number(r.nodeId), jobId: r.jobId })) };
  return o;
}
