// New job results of concurrent requests, recorded together: one statement inserts every
// report of a batch whose job_id is new and adds them to the aggregates, in one commit
// (db/batcher.ts). A report whose job_id already exists — a replay, an upgrade, a conflict —
// is left out by ON CONFLICT DO NOTHING and then goes through recordResult's path, which
// takes the existing row FOR UPDATE; so the outcomes are those of results.ts, report by report.
import { sql, type Database } from '../db/database.js';
import { Batcher, type BatcherOptions } from '../db/batcher.js';
import { isRetryable, isUnavailable } from '../db/errors.js';
import { ensureModelId } from './models.js';
import { recordResult, type RecordOutcome, type Report } from './results.js';

// Aggregates are summed per row first (ON CONFLICT DO UPDATE may touch a row once per
// statement) and written in key order, so concurrent batches lock rows in the same order.
const INSERT_MANY = sql('results_insert_many', `WITH input AS (
  SELECT q.*, CASE WHEN q.status = 'success' THEN coalesce(m.points_per_job, $6::numeric) ELSE 0 END AS points
  FROM unnest($1::text[], $2::bigint[], $3::integer[], $4::text[], $5::jsonb[]) AS q(job_id, node_id, model_id, status, result)
  JOIN models m ON m.id = q.model_id
),
credited AS (
  INSERT INTO job_results (job_id, node_id, model_id, status, result, points, received_at)
  SELECT job_id, node_id, model_id, status, result, points, coalesce($7::timestamptz, now()) FROM input ORDER BY job_id
  ON CONFLICT (job_id) DO NOTHING
  RETURNING job_id, node_id, model_id, status, points, received_at, (received_at AT TIME ZONE 'UTC')::date AS day
),
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
-- A node's first success of a day for a model makes cached rosters reload (model-roster.ts).
-- The models are locked in id order first: concurrent batches never wait for each other in
-- a cycle.
bumped AS (
  SELECT id FROM models WHERE id IN (SELECT model_id FROM per_day WHERE inserted) ORDER BY id FOR NO KEY UPDATE
),
roster AS (
  UPDATE models SET roster_version = roster_version + 1 WHERE id IN (SELECT id FROM bumped)
)
SELECT job_id, points::float8 AS points FROM credited`);

interface New { report: Report; modelId: number }
const MAX_ATTEMPTS = 5;

/** For each report, its points when it was new and is now recorded, or undefined when its job_id exists. */
async function insertNew(db: Database, batch: readonly New[], clock?: () => string): Promise<(number | undefined)[]> {
  const values = [
    batch.map((n) => n.report.jobId),
    batch.map((n) => n.report.nodeId),
    batch.map((n) => n.modelId),
    batch.map((n) => n.report.status),
    batch.map((n) => JSON.stringify(n.report.result)),
    batch[0]!.report.defaultPoints,
    clock?.() ?? null,
  ];
  for (let attempt = 1; ; attempt++) {
    try {
      const rows = await db.query<{ job_id: string; points: number }>(INSERT_MANY, values);
      const points = new Map(rows.map((r) => [r.job_id, r.points]));
      return batch.map((n) => points.get(n.report.jobId));
    } catch (err) {
      // A deadlock with another server's batch committed nothing; try again.
      if (attempt < MAX_ATTEMPTS && isRetryable(err)) continue;
      throw err;
    }
  }
}

export interface RecorderOptions {
  batch?: BatcherOptions;
  /**
   * Tests only: the time new reports are received at, standing in for the database's clock
   * (unlike Report.receivedAt, which stands for an explicit time, as imports give).
   */
  clock?: () => string;
}

/** Records reports with the outcomes of recordResult, sharing statements between concurrent ones. */
export class ResultRecorder {
  private readonly batcher: Batcher<New, number | undefined | Error>;
  private readonly clock?: () => string;

  constructor(private readonly db: Database, opts: RecorderOptions = {}) {
    this.batcher = new Batcher((batch) => this.insertBatch(batch), opts.batch ?? { maxBatch: 64, maxInFlight: 4 });
    this.clock = opts.clock;
  }

  async record(report: Report): Promise<RecordOutcome> {
    const modelId = await ensureModelId(this.db, report.modelName);
    const inserted = await this.batcher.load({ report, modelId });
    if (inserted instanceof Error) throw inserted;
    if (inserted !== undefined) return { kind: 'recorded', status: report.status, points: inserted };
    return recordResult(this.db, report);
  }

  private async insertBatch(batch: New[]): Promise<(number | undefined | Error)[]> {
    // One job_id once per statement; a repeat waits for the path of existing rows.
    const seen = new Set<string>();
    const first = batch.filter((n) => !seen.has(n.report.jobId) && seen.add(n.report.jobId));
    // The default points are a parameter of the statement: a batch has one value.
    const byDefault = new Map<number, New[]>();
    for (const n of first) byDefault.set(n.report.defaultPoints, [...(byDefault.get(n.report.defaultPoints) ?? []), n]);
    const points = new Map<New, number | undefined | Error>();
    for (const group of byDefault.values()) {
      try {
        (await insertNew(this.db, group, this.clock)).forEach((p, i) => points.set(group[i]!, p));
      } catch (err) {
        if (group.length === 1 || isUnavailable(err)) throw err;
        // One report the database refuses (a value it cannot take) must not fail the others:
        // alone, each gets its own answer.
        for (const n of group) {
          try {
            points.set(n, (await insertNew(this.db, [n], this.clock))[0]);
          } catch (e) {
            points.set(n, e instanceof Error ? e : new Error(String(e)));
          }
        }
      }
    }
    return batch.map((n) => points.get(n));
  }
}
