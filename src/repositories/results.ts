// Recording job results with exactly-once crediting. The common case (a new job_id) is one
// statement: insert the result and bump the aggregates in the same commit. Anything else takes
// the existing row FOR UPDATE, so concurrent duplicates queue behind each other and each sees
// the state the previous one committed.
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

// The aggregate upserts shared by a new success and an upgrade from error to success.
// `credited` holds the one row whose points and time to credit.
const CREDIT_CTES = `
daily AS (
  INSERT INTO node_daily_points (node_id, day, points, successes)
  SELECT node_id, (received_at AT TIME ZONE 'UTC')::date, points, 1 FROM credited WHERE status = 'success'
  ON CONFLICT (node_id, day) DO UPDATE
    SET points = node_daily_points.points + EXCLUDED.points, successes = node_daily_points.successes + 1
),
overall AS (
  INSERT INTO model_nodes (model_id, node_id, first_success_at, last_success_at)
  SELECT model_id, node_id, received_at, received_at FROM credited WHERE status = 'success'
  ON CONFLICT (model_id, node_id) DO UPDATE
    SET first_success_at = least(model_nodes.first_success_at, EXCLUDED.first_success_at),
        last_success_at = greatest(model_nodes.last_success_at, EXCLUDED.last_success_at)
),
-- The past daily points servers cache (points.ts) stay exact: the past daily points servers cache (points.ts): an explicit time may be any day.
history AS (
  UPDATE points_history SET version = version + 1
  WHERE $7::timestamptz IS NOT NULL AND EXISTS (SELECT 1 FROM credited WHERE status = 'success')
),
per_day AS (
  INSERT INTO model_node_days (model_id, node_id, day, first_success_at, last_success_at)
  SELECT model_id, node_id, (received_at AT TIME ZONE 'UTC')::date, received_at, received_at FROM credited WHERE status = 'success'
  ON CONFLICT (model_id, node_id, day) DO UPDATE
    SET first_success_at = least(model_node_days.first_success_at, EXCLUDED.first_success_at),
        last_success_at = greatest(model_node_days.last_success_at, EXCLUDED.last_success_at)
  RETURNING model_id, (xmax = 0) AS inserted
),
-- Rosters cached by servers stay exact (model-roster.ts): a node's first success of a day for
-- a model, or a success at an explicit (possibly earlier) time, makes them reload.
roster AS (
  UPDATE models SET roster_version = roster_version + 1
  WHERE id IN (SELECT model_id FROM per_day WHERE inserted OR $7::timestamptz IS NOT NULL)
)
SELECT points::float8 AS points FROM credited`;

// Points are looked up in the same statement, so a success earns the points_per_job in force
// at the moment of the report.
const POINTS_EXPR = `CASE WHEN $4::text = 'success'
  THEN coalesce((SELECT points_per_job FROM models WHERE id = $3::integer), $6::numeric) ELSE 0 END`;

const INSERT_NEW = sql('results_insert_new', `WITH credited AS (
  INSERT INTO job_results (job_id, node_id, model_id, status, result, points, received_at)
  VALUES ($1::text, $2::bigint, $3::integer, $4::text, $5::jsonb, ${POINTS_EXPR}, coalesce($7::timestamptz, now()))
  ON CONFLICT (job_id) DO NOTHING
  RETURNING node_id, model_id, status, points, received_at
),${CREDIT_CTES}`);

const UPGRADE = sql('results_upgrade', `WITH credited AS (
  UPDATE job_results SET status = $4::text, result = $5::jsonb, points = ${POINTS_EXPR},
    received_at = coalesce($7::timestamptz, now())
  WHERE job_id = $1::text AND node_id = $2::bigint AND model_id = $3::integer
  RETURNING node_id, model_id, status, points, received_at
),${CREDIT_CTES}`);

const LOCK_EXISTING = sql('results_lock_existing', `SELECT r.node_id, r.model_id, r.status, r.result = $2::jsonb AS same_result
  FROM job_results r WHERE r.job_id = $1::text FOR UPDATE`);

interface Existing { node_id: number; model_id: number; status: ResultStatus; same_result: boolean }

function params(r: Report, modelId: number): unknown[] {
  const at = r.receivedAt instanceof Date ? r.receivedAt.toISOString() : (r.receivedAt ?? null);
  return [r.jobId, r.nodeId, modelId, r.status, JSON.stringify(r.result), r.defaultPoints, at];
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

export async function recordResult(db: Database, r: Report): Promise<RecordOutcome> {
  const modelId = await ensureModelId(db, r.modelName);
  const values = params(r, modelId);
  // Autocommit: the statement is its own transaction.
  const [inserted] = await db.query<{ points: number }>(INSERT_NEW, values);
  if (inserted) return { kind: 'recorded', status: r.status, points: inserted.points };
  return db.transaction(async (tx: Queryable) => {
    const [existing] = await tx.query<Existing>(LOCK_EXISTING, [r.jobId, values[4]]);
    // The row can only vanish if the concurrent insert we collided with rolled back.
    if (!existing) {
      const [row] = await tx.query<{ points: number }>(INSERT_NEW, values);
      if (row) return { kind: 'recorded', status: r.status, points: row.points };
      return { kind: 'conflict', detail: `Job ${r.jobId} is being reported concurrently; retry` };
    }
    const decision = decide(existing, r, modelId);
    if (decision !== 'upgrade') return decision;
    const [upgraded] = await tx.query<{ points: number }>(UPGRADE, values);
    return { kind: 'recorded', status: 'success', points: upgraded!.points };
  });
}
