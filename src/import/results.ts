// `ins import results FILE.csv`: job results history with the points they were credited.
// Columns job_id,node_name,model_name,status,points,received_at and optionally result (a JSON
// object). Nodes must exist (import them first); models are created as needed. The
// aggregates grow by exactly what is imported, in the same transaction.
import { sql, type Queryable } from '../db/database.js';
import { parseDateTime } from '../validation/datetime.js';
import type { ImportSpec } from './run.js';

const length = (s: string): number => [...s].length;
const POINTS = /^\d+(\.\d+)?$/;

function checkRow(f: Record<string, string>): (string | number | null)[] | string {
  const { job_id = '', node_name = '', model_name = '', status = '', points = '', received_at = '', result = '' } = f;
  if (length(job_id) < 1 || length(job_id) > 128) return 'job_id must be 1 to 128 characters';
  if (length(node_name) < 1 || length(node_name) > 128) return 'node_name must be 1 to 128 characters';
  if (length(model_name) < 1 || length(model_name) > 256) return 'model_name must be 1 to 256 characters';
  if (status !== 'success' && status !== 'error') return `status must be "success" or "error" (got "${status.slice(0, 40)}")`;
  if (!POINTS.test(points) || !Number.isFinite(Number(points)) || Number(points) > 1e9) return `points must be a number >= 0 (got "${points.slice(0, 40)}")`;
  if (status === 'error' && Number(points) !== 0) return 'an error earns 0 points';
  const at = parseDateTime(received_at);
  if (!at.ok) return `received_at is not an ISO-8601 date-time: ${at.error}`;
  let json = '{}';
  if (result !== '') {
    let parsed: unknown;
    try {
      parsed = JSON.parse(result);
    } catch {
      return 'result is not valid JSON';
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return 'result must be a JSON object';
    json = JSON.stringify(parsed);
  }
  return [job_id, node_name, model_name, status, points, at.iso, json];
}

async function apply(tx: Queryable): Promise<number> {
  await tx.exec(`INSERT INTO models (name) SELECT DISTINCT model_name FROM import_results ON CONFLICT (name) DO NOTHING`);
  await tx.exec(`CREATE TEMP TABLE import_resolved ON COMMIT DROP AS
    SELECT s.job_id, n.id AS node_id, m.id AS model_id, s.status, s.result, s.points, s.received_at,
           (s.received_at AT TIME ZONE 'UTC')::date AS day
    FROM import_results s JOIN nodes n ON n.name = s.node_name JOIN models m ON m.name = s.model_name`);
  const [{ n }] = (await tx.query<{ n: number }>(sql('import_results_insert', `WITH ins AS (
      INSERT INTO job_results (job_id, node_id, model_id, status, result, points, received_at)
      SELECT job_id, node_id, model_id, status, result, points, received_at FROM import_resolved
      RETURNING 1)
    SELECT count(*)::int AS n FROM ins`))) as [{ n: number }];
  await tx.exec(`
    INSERT INTO node_daily_points (node_id, day, points, successes)
    SELECT node_id, day, sum(points), count(*) FROM import_resolved WHERE status = 'success' GROUP BY node_id, day
    ON CONFLICT (node_id, day) DO UPDATE
      SET points = node_daily_points.points + EXCLUDED.points, successes = node_daily_points.successes + EXCLUDED.successes;
    INSERT INTO model_nodes (model_id, node_id, first_success_at, last_success_at)
    SELECT model_id, node_id, min(received_at), max(received_at) FROM import_resolved WHERE status = 'success' GROUP BY model_id, node_id
    ON CONFLICT (model_id, node_id) DO UPDATE
      SET first_success_at = least(model_nodes.first_success_at, EXCLUDED.first_success_at),
          last_success_at = greatest(model_nodes.last_success_at, EXCLUDED.last_success_at);
    INSERT INTO model_node_days (model_id, node_id, day, first_success_at, last_success_at)
    SELECT model_id, node_id, day, min(received_at), max(received_at) FROM import_resolved WHERE status = 'success' GROUP BY model_id, node_id, day
    ON CONFLICT (model_id, node_id, day) DO UPDATE
      SET first_success_at = least(model_node_days.first_success_at, EXCLUDED.first_success_at),
          last_success_at = greatest(model_node_days.last_success_at, EXCLUDED.last_success_at);
    UPDATE models SET roster_version = roster_version + 1 WHERE id IN (SELECT DISTINCT model_id FROM import_resolved);
    UPDATE points_history SET version = version + 1;
    ANALYZE job_results; ANALYZE node_daily_points; ANALYZE model_nodes; ANALYZE model_node_days;`);
  return n;
}

export const resultsImport: ImportSpec = {
  kind: 'results',
  staging: 'import_results',
  columns: [['job_id', 'text'], ['node_name', 'text'], ['model_name', 'text'], ['status', 'text'], ['points', 'numeric'], ['received_at', 'timestamptz'], ['result', 'jsonb']],
  headers: [['job_id', 'node_name', 'model_name', 'status', 'points', 'received_at']],
  optional: ['result'],
  check: (fields) => checkRow(fields),
  databaseChecks: `
    SELECT s.line, 'unknown node "' || s.node_name || '" (import nodes first)' AS reason
      FROM import_results s WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.name = s.node_name)
    UNION ALL
    SELECT s.line, 'job_id "' || s.job_id || '" is already recorded'
      FROM import_results s JOIN job_results r ON r.job_id = s.job_id
    UNION ALL
    SELECT x.line, 'job_id "' || x.job_id || '" repeats line ' || x.first
      FROM (SELECT line, job_id, min(line) OVER (PARTITION BY job_id) AS first FROM import_results) x WHERE x.line > x.first`,
  apply,
};
