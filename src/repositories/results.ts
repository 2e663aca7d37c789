// Recording job results with exactly-once crediting. The common case (a new job_id) is one
// statement, for one report or a batch of them (results-batch.ts): insert the results and add
// them to the aggregates in the same commit. Anything else takes the existing row FOR UPDATE,
// so concurrent duplicates queue behind each other and each sees the state the previous one
// committed.
//
// Job states (per job_id):   (none) --error--> error --success--> success
//                            (none) --success-----------------> success
// success is final; a repeat of the same report is a replay; error after error is a replay.
import { sql, type Database, type Queryable } from '../db/database.js';
import { ensureModelId } from './models.js';

export type ResultStatus = 'success' | 'error';

export interface Report {
  nodeId: number;
  jobId: string;
  modelName: string;
  status: ResultStatus;
  result: Record<string, unknown>;
  /** Points of a success when the model has no points_per_job of its own. */
  defaultPoints: number;
  /** Only for tests and imports; the service always uses the database clock. */
  receivedAt?: Date | string;
}

export type RecordOutcome =
  | { kind: 'recorded'; status: ResultStatus; points: number }
  | { kind: 'replayed'; status: ResultStatus }
  | { kind: 'conflict'; detail: string };

// The aggregate upserts shared by new results and an upgrade from error to success, over
// `credited` (the rows to credit, with their points, time and UTC day). Sums are made per
// aggregate row first (ON CONFLICT DO UPDATE may touch a row once per statement) and written
// in key order, so concurrent statements lock rows in the same order. `explicit` is SQL that
// is true when the times were given (imports, tests) rather than the database's clock.
const creditCtes = (explicit: string) => `
daily AS (
  INSERT INTO node_daily_points (node_id, day, points, successes)
  SELECT node_id, day, sum(points), count(*) FROM credited WHERE status = 'success'
  GROUP BY node_id, day ORDER BY node_id, day
  ON CONFLICT (node_id, day) DO UPDATE
    SET points = node_daily_points.points + EXCLUDED.points, successes = node_daily_points.successes + EXCLUDED.successes
),
overall AS (
  INSERT INTO model_nodes (model_id, node_id, first_success_at, last_success_at)
  SELECT model_id, node_id, min(received_at), max(received_at) FROM credited WHERE status = 'success'
  GROUP BY model_id, node_id ORDER BY model_id, node_id
  ON CONFLICT (model_id, node_id) DO UPDATE
    SET first_success_at = least(model_nodes.first_success_at, EXCLUDED.first_success_at),
        last_success_at = greatest(model_nodes.last_success_at, EXCLUDED.last_success_at)
),
per_day AS (
  INSERT INTO model_node_days (model_id, node_id, day, first_success_at, last_success_at)
  SELECT model_id, node_id, day, min(received_at), max(received_at) FROM credited WHERE status = 'success'
  GROUP BY model_id, node_id, day ORDER BY model_id, node_id, day
  ON CONFLICT (model_id, node_id, day) DO UPDATE
    SET first_success_at = least(model_node_days.first_success_at, EXCLUDED.first_success_at),
        last_success_at = greatest(model_node_days.last_success_at, EXCLUDED.last_success_at)
  RETURNING model_id, (xmax = 0) AS inserted
),
-- Rosters cached by servers stay exact (model-roster.ts): a node's first success of a day for
-- a model, or a success at an explicit (possibly earlier) time, makes them reload. The models
-- are locked in id order first, so statements bumping several never wait in a cycle.
bumped AS (
  SELECT id FROM models WHERE id IN (SELECT model_id FROM per_day WHERE inserted OR ${explicit})
  ORDER BY id FOR NO KEY UPDATE
),
roster AS (
  UPDATE models SET roster_version = roster_version + 1 WHERE id IN (SELECT id FROM bumped)
),
-- Likewise the older daily points servers cache (points.ts): an explicit time may be any day.
history AS (
  UPDATE points_history SET version = version + 1
  WHERE ${explicit} AND EXISTS (SELECT 1 FROM credited WHERE status = 'success')
)
SELECT job_id, points::float8 AS points FROM credited`;

// Points are looked up in the same statement, so a success earns the points_per_job in force
// at the moment of the report.
const POINTS = (status: string, modelPoints: string, defaultPoints: string) => `CASE WHEN ${status} = 'success' THEN coalesce(${modelPoints}, ${defaultPoints}) ELSE 0 END`;

// New job ids, any number at once: $1..$5 job ids, node ids, model ids, statuses, results;
// $6 default points; $7 the time (NULL: the database's clock); $8 whether $7 is an explicit
// time. A job id that exists already is left alone (ON CONFLICT DO NOTHING) and not returned.
const INSERT_NEW = sql('results_insert_new', `WITH credited AS (
  INSERT INTO job_results (job_id, node_id, model_id, status, result, points, received_at)
  SELECT q.job_id, q.node_id, q.model_id, q.status, q.result, ${POINTS('q.status', 'm.points_per_job', '$6::numeric')}, coalesce($7::timestamptz, now())
  FROM unnest($1::text[], $2::bigint[], $3::integer[], $4::text[], $5::jsonb[]) AS q(job_id, node_id, model_id, status, result)
  JOIN models m ON m.id = q.model_id
  ORDER BY q.job_id
  ON CONFLICT (job_id) DO NOTHING
  RETURNING job_id, node_id, model_id, status, points, received_at, (received_at AT TIME ZONE 'UTC')::date AS day
),${creditCtes('$8::boolean')}`);

// One job from error to success: $1 job id, $2 node id, $3 model id, $4 result, $5 default
// points, $6 explicit time or NULL.
const UPGRADE = sql('results_upgrade', `WITH credited AS (
  UPDATE job_results SET status = 'success', result = $4::jsonb,
    points = ${POINTS("'success'", '(SELECT points_per_job FROM models WHERE id = $3::integer)', '$5::numeric')},
    received_at = coalesce($6::timestamptz, now())
  WHERE job_id = $1::text AND node_id = $2::bigint AND model_id = $3::integer
  RETURNING job_id, node_id, model_id, status, points, received_at, (received_at AT TIME ZONE 'UTC')::date AS day
),${creditCtes('$6::timestamptz IS NOT NULL')}`);

const LOCK_EXISTING = sql('results_lock_existing', `SELECT r.node_id, r.model_id, r.status, r.result = $2::jsonb AS same_result
  FROM job_results r WHERE r.job_id = $1::text FOR UPDATE`);

interface Existing { node_id: number; model_id: number; status: ResultStatus; same_result: boolean }

/** The report's explicit time as ISO text, or null for the database's clock. */
export const explicitTime = (r: Report): string | null => (r.receivedAt instanceof Date ? r.receivedAt.toISOString() : (r.receivedAt ?? null));

export interface NewResult { report: Report; modelId: number }

/**
 * Inserts the reports whose job id is new, with their aggregates, in one statement (its own
 * transaction unless db is one). For each report: its points if it was inserted, undefined
 * if its job id exists. One defaultPoints for all; `clock` (tests) stands in for the
 * database's clock, unlike Report.receivedAt, an explicit time (one for all, too).
 */
export async function insertNewResults(db: Queryable, batch: readonly NewResult[], clock?: string): Promise<(number | undefined)[]> {
  const explicit = explicitTime(batch[0]!.report);
  const rows = await db.query<{ job_id: string; points: number }>(INSERT_NEW, [
    batch.map((n) => n.report.jobId),
    batch.map((n) => n.report.nodeId),
    batch.map((n) => n.modelId),
    batch.map((n) => n.report.status),
    batch.map((n) => JSON.stringify(n.report.result)),
    batch[0]!.report.defaultPoints,
    explicit ?? clock ?? null,
    explicit !== null,
  ]);
  const points = new Map(rows.map((r) => [r.job_id, r.points]));
  return batch.map((n) => points.get(n.report.jobId));
}

function decide(existing: Existing, r: Report, modelId: number): RecordOutcome | 'upgrade' {
  if (Number(existing.node_id) !== r.nodeId) {
    return { kind: 'conflict', detail: `Job ${r.jobId} was already reported by another node` };
  }
  if (existing.model_id !== modelId) {
    return { kind: 'conflict', detail: `Job ${r.jobId} was recorded for another model` };
  }
  if (existing.status === 'success') {
    if (r.status === 'success' && existing.same_result) return { kind: 'replayed', status: 'success' };
    return { kind: 'conflict', detail: `Job ${r.jobId} already succeeded with a different report` };
  }
  // Recorded as error.
  return r.status === 'success' ? 'upgrade' : { kind: 'replayed', status: 'error' };
}

/** The outcome of a report whose job id may already exist, one report at a time. */
export async function recordExisting(db: Database, r: Report, modelId: number): Promise<RecordOutcome> {
  return db.transaction(async (tx: Queryable) => {
    const result = JSON.stringify(r.result);
    const [existing] = await tx.query<Existing>(LOCK_EXISTING, [r.jobId, result]);
    // The row can only vanish if the concurrent insert we collided with rolled back.
    if (!existing) {
      const [points] = await insertNewResults(tx, [{ report: r, modelId }]);
      if (points !== undefined) return { kind: 'recorded', status: r.status, points };
      return { kind: 'conflict', detail: `Job ${r.jobId} is being reported concurrently; retry` };
    }
    const decision = decide(existing, r, modelId);
    if (decision !== 'upgrade') return decision;
    const [upgraded] = await tx.query<{ points: number }>(UPGRADE, [r.jobId, r.nodeId, modelId, result, r.defaultPoints, explicitTime(r)]);
    return { kind: 'recorded', status: 'success', points: upgraded!.points };
  });
}

/** Records one report (tests, tools); the service batches them with ResultRecorder. */
export async function recordResult(db: Database, r: Report): Promise<RecordOutcome> {
  const modelId = await ensureModelId(db, r.modelName);
  const [points] = await insertNewResults(db, [{ report: r, modelId }]);
  if (points !== undefined) return { kind: 'recorded', status: r.status, points };
  return recordExisting(db, r, modelId);
}
