// The aggregates as stored and as they should be, recomputed from job_results: a test that
// compares the two for every key proves the write paths kept them consistent.
import { sql, type Database } from '../../src/db/database.js';

// The aggregates as they should be, recomputed from job_results and point_reversals. A day's
// points are its credits (reversed since or not) less the reversals whose ledger day it is
// (docs/ledger.md); its successes, its credits less those reversed while their day was open; the
// score checks' part of both likewise (issue 55, job_results.is_check).
export const RECOMPUTED = {
  daily: `WITH c AS (
      SELECT node_id, (received_at AT TIME ZONE 'UTC')::date AS day, sum(points) AS points, count(*) AS n,
        sum(points) FILTER (WHERE is_check) AS cp, count(*) FILTER (WHERE is_check) AS cn
      FROM job_results WHERE status IN ('success', 'reversed') GROUP BY 1, 2),
    r AS (
      SELECT p.node_id, p.day, sum(p.points) AS points, count(*) FILTER (WHERE (j.received_at AT TIME ZONE 'UTC')::date = p.day) AS n,
        sum(p.points) FILTER (WHERE j.is_check) AS cp, count(*) FILTER (WHERE j.is_check AND (j.received_at AT TIME ZONE 'UTC')::date = p.day) AS cn
      FROM point_reversals p JOIN job_results j ON j.job_id = p.job_id GROUP BY 1, 2)
    SELECT node_id::text, day::text, (coalesce(c.points, 0) - coalesce(r.points, 0))::float8 AS points, (coalesce(c.n, 0) - coalesce(r.n, 0))::int AS successes,
      (coalesce(c.cp, 0) - coalesce(r.cp, 0))::float8 AS check_points, (coalesce(c.cn, 0) - coalesce(r.cn, 0))::int AS checks
    FROM c FULL JOIN r USING (node_id, day)
    WHERE coalesce(c.points, 0) <> coalesce(r.points, 0) OR coalesce(c.n, 0) <> coalesce(r.n, 0) ORDER BY 1, 2`,
  overall: `SELECT model_id, node_id::text, min(received_at)::text AS f, max(received_at)::text AS l
    FROM job_results WHERE status = 'success' GROUP BY 1, 2 ORDER BY 1, 2`,
  perDay: `SELECT model_id, node_id::text, ((received_at AT TIME ZONE 'UTC')::date)::text AS day, min(received_at)::text AS f, max(received_at)::text AS l
    FROM job_results WHERE status = 'success' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
};
export const STORED = {
  daily: `SELECT node_id::text, day::text, points::float8 AS points, successes, check_points::float8 AS check_points, checks
    FROM node_daily_points WHERE points <> 0 OR successes <> 0 ORDER BY 1, 2`,
  overall: `SELECT model_id, node_id::text, first_success_at::text AS f, last_success_at::text AS l FROM model_nodes ORDER BY 1, 2`,
  perDay: `SELECT model_id, node_id::text, day::text, first_success_at::text AS f, last_success_at::text AS l FROM model_node_days ORDER BY 1, 2, 3`,
};

/** Stored and recomputed rows of each aggregate, to compare with toEqual. */
export async function aggregatesAndRecomputation(db: Database): Promise<{ stored: unknown[][]; recomputed: unknown[][] }> {
  const keys = Object.keys(STORED) as (keyof typeof STORED)[];
  const stored = await Promise.all(keys.map((k) => db.query(sql(`aggregates_stored_${k}`, STORED[k]))));
  const recomputed = await Promise.all(keys.map((k) => db.query(sql(`aggregates_recomputed_${k}`, RECOMPUTED[k]))));
  return { stored, recomputed };
}
