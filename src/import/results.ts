// `ins import results FILE.csv`: job results history with the points they were credited.
// Columns job_id,node_name,model_name,status,points,received_at and optionally result (a JSON
// object). Nodes must exist (import them first); models are created as needed. The
// aggregates grow by exactly what is imported, in the same transaction. A success on a day the
// points ledger has closed is a bad row (docs/ledger.md): a closed day never changes. The
// check reads ledger_state FOR SHARE, held until the import commits, so a day cannot close
// between the check and the commit (the close waits, then counts the imported credits).
import { hasUnstorableText, isUnstorable, NUL_ERROR } from '../validation/pydantic.js';
import { sql, type Queryable } from '../db/database.js';
import { CREDIT_PART } from '../results/credit.js';
import { parsePoints } from '../points-value.js';
import { parseDateTime } from '../validation/datetime.js';
import type { ImportSpec } from './run.js';

const length = (s: string): number => [...s].length;

function checkRow(f: Record<string, string>): (string | number | null)[] | string {
  const { job_id = '', node_name = '', model_name = '', status = '', points = '', received_at = '', result = '' } = f;
  if ([job_id, node_name, model_name].some(isUnstorable)) return NUL_ERROR;
  if (length(job_id) < 1 || length(job_id) > 128) return 'job_id must be 1 to 128 characters';
  if (length(node_name) < 1 || length(node_name) > 128) return 'node_name must be 1 to 128 characters';
  if (length(model_name) < 1 || length(model_name) > 256) return 'model_name must be 1 to 256 characters';
  if (status !== 'success' && status !== 'error') return `status must be "success" or "error" (got "${status.slice(0, 40)}")`;
  if (parsePoints(points) === undefined) return `points must be a number >= 0 (got "${points.slice(0, 40)}")`;
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
    if (hasUnstorableText(parsed)) return `result: ${NUL_ERROR}`;
    json = JSON.stringify(parsed);
  }
  return [job_id, node_name, model_name, status, points, at.iso, json];
}

// The staged rows, resolved to ids, credited with their explicit times and points by the
// service's credit part (results/credit.ts: the same text in every credit statement): imported
// history lands in the aggregates exactly as reported history does.
export const CREDIT_IMPORT = sql(
  'import_results_credit',
  `WITH input AS (
  SELECT s.job_id, n.id AS node_id, m.id AS model_id, s.status, s.result, s.points, s.received_at, true AS explicit, false AS is_check
  FROM import_results s JOIN nodes n ON n.name = s.node_name JOIN models m ON m.name = s.model_name
),
${CREDIT_PART}SELECT count(*)::int AS n FROM credited`,
);

async function apply(tx: Queryable): Promise<number> {
  await tx.exec(`INSERT INTO models (name) SELECT DISTINCT model_name FROM import_results ON CONFLICT (name) DO NOTHING`);
  const [row] = await tx.query<{ n: number }>(CREDIT_IMPORT);
  await tx.exec('ANALYZE job_results; ANALYZE node_daily_points; ANALYZE model_nodes; ANALYZE model_node_days;');
  return row!.n;
}

export const resultsImport: ImportSpec = {
  kind: 'results',
  staging: 'import_results',
  columns: [
    ['job_id', 'text'],
    ['node_name', 'text'],
    ['model_name', 'text'],
    ['status', 'text'],
    ['points', 'numeric'],
    ['received_at', 'timestamptz'],
    ['result', 'jsonb'],
  ],
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
      FROM (SELECT line, job_id, min(line) OVER (PARTITION BY job_id) AS first FROM import_results) x WHERE x.line > x.first
    UNION ALL
    SELECT s.line, 'received_at falls on ' || ((s.received_at AT TIME ZONE 'UTC')::date)::text || ', a day the points ledger has closed (closed through '
        || l.closed_through::text || '): a closed day never changes; import history before its day closes (docs/ledger.md)'
      FROM import_results s, (SELECT closed_through FROM ledger_state FOR SHARE) l
      WHERE s.status = 'success' AND (s.received_at AT TIME ZONE 'UTC')::date <= l.closed_through
    UNION ALL
    SELECT s.line, 'received_at ' || to_char(s.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ' is in the future (the database''s clock says '
        || to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || '): history is what was received already'
      FROM import_results s WHERE s.received_at > now() + interval '5 minutes'`,
  apply,
};
