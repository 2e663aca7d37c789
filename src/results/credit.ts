// Crediting: every point the service credits is recorded in job_results and added to the
// aggregates the reads are served from (node_daily_points, model_nodes, model_node_days, and
// the versions of the caches above them) in the statement that records it. Three statements
// credit, each written whole where it runs:
// - CREDIT_REPORTS (here): node-key reports, batched, and upgrades from error to success
//   (results/recorder.ts);
// - jobs_complete (jobs/sql/complete.ts): reports with a job key, which also end the lease;
// - import_results_credit (import/results.ts): imported history with its explicit times.
// Their aggregate part — from `credited AS (` to the end of `history AS (…)`, between the
// markers `-- credit: begin` and `-- credit: end` — is written once, CREDIT_PART, and included
// by all three (test/credit-statements.test.ts), so the aggregates cannot drift apart between
// write paths.
// Each statement provides `input` (job_id, node_id, model_id, status, result, points,
// received_at, explicit: the time was given, by an import or a test, rather than taken from the
// database's clock; is_check: a score check's credit, kept apart in node_daily_points
// check_points and checks — issue 55, only jobs_complete has any) before the marker, and reads `credited` (the rows recorded) after it.
//
// A job id that exists already is upgraded when the stored row is an error of the same node
// and model and the new one a success (ON CONFLICT … DO UPDATE … WHERE); otherwise it is left
// alone and not returned, and the caller decides (replay or conflict, results/recorder.ts).
// Sums are made per aggregate row first (ON CONFLICT DO UPDATE may touch a row once per
// statement) and written in key order, so concurrent statements lock rows in the same order.
// Rosters cached by servers stay exact (repositories/model-roster.ts): a node's first success of
// a day for a model, or a success at an explicit (possibly earlier) time, makes them reload; the
// models are locked in id order first, so statements bumping several never wait in a cycle.
// Likewise the older daily points servers cache (repositories/points.ts): an explicit time may
// be any day.
import { sql } from '../db/database.js';

// The credit part: from `credited AS (` to the end of `history AS (…)`, between its markers.
// Included as text (not a SQL function): it is CTEs of the including statement, reading its
// `input` and read by what follows, and each statement plans it with its own input.
export const CREDIT_PART = `-- credit: begin
credited AS (
  INSERT INTO job_results AS r (job_id, node_id, model_id, status, result, points, received_at, is_check)
  SELECT job_id, node_id, model_id, status, result, points, received_at, is_check FROM input
  ORDER BY job_id
  ON CONFLICT (job_id) DO UPDATE
    SET status = 'success', result = EXCLUDED.result, points = EXCLUDED.points, received_at = EXCLUDED.received_at, is_check = EXCLUDED.is_check
    WHERE r.status = 'error' AND EXCLUDED.status = 'success' AND r.node_id = EXCLUDED.node_id AND r.model_id = EXCLUDED.model_id
  RETURNING job_id, node_id, model_id, status, points, received_at, (received_at AT TIME ZONE 'UTC')::date AS day, is_check
),
daily AS (
  INSERT INTO node_daily_points (node_id, day, points, successes, check_points, checks)
  SELECT node_id, day, sum(points), count(*), coalesce(sum(points) FILTER (WHERE is_check), 0), count(*) FILTER (WHERE is_check)
  FROM credited WHERE status = 'success'
  GROUP BY node_id, day ORDER BY node_id, day
  ON CONFLICT (node_id, day) DO UPDATE
    SET points = node_daily_points.points + EXCLUDED.points, successes = node_daily_points.successes + EXCLUDED.successes,
      check_points = node_daily_points.check_points + EXCLUDED.check_points, checks = node_daily_points.checks + EXCLUDED.checks
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
explicit AS (SELECT EXISTS (SELECT 1 FROM input WHERE explicit) AS given),
bumped AS (
  SELECT id FROM models
  WHERE id IN (SELECT model_id FROM per_day WHERE inserted OR (SELECT given FROM explicit))
  ORDER BY id FOR NO KEY UPDATE
),
roster AS (
  UPDATE models SET roster_version = roster_version + 1 WHERE id IN (SELECT id FROM bumped)
),
history AS (
  UPDATE points_history SET version = version + 1
  WHERE (SELECT given FROM explicit) AND EXISTS (SELECT 1 FROM credited WHERE status = 'success')
)
-- credit: end
`;

// The service's reports, any number at once: $1..$5 job ids, node ids, model ids, statuses,
// results (parallel arrays); $6 the default points of a success; $7 the time (NULL: the
// database's clock); $8 whether $7 is an explicit time. A success earns the model's
// points_per_job as it is at this statement. Answers the recorded job ids with their points.
export const CREDIT_REPORTS = sql(
  'results_credit',
  `WITH input AS (
  SELECT q.job_id, q.node_id, q.model_id, q.status, q.result,
    CASE WHEN q.status = 'success' THEN coalesce(m.points_per_job, $6::numeric) ELSE 0 END AS points,
    coalesce($7::timestamptz, now()) AS received_at, $8::boolean AS explicit, false AS is_check
  FROM unnest($1::text[], $2::bigint[], $3::integer[], $4::text[], $5::jsonb[]) AS q(job_id, node_id, model_id, status, result)
  JOIN models m ON m.id = q.model_id
),
${CREDIT_PART}SELECT job_id, points::float8 AS points FROM credited`,
);
