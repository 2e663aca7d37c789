// The aggregates as stored and as they should be, recomputed from job_results: a test that
// compares the two for every key proves the write paths kept them consistent.
import { sql, type Database } from '../../src/db/database.js';

// The aggregates as they should be, recomputed from job_results.
export const RECOMPUTED = {
  daily: `SELECT node_id::text, ((received_at AT TIME ZONE 'UTC')::date)::text AS day, sum(points)::float8 AS points, count(*)::int AS successes
    FROM job_results WHERE status = 'success' GROUP BY 1, 2 ORDER BY 1, 2`,
  overall: `SELECT model_id, node_id::text, min(received_at)::text AS f, max(received_at)::text AS l
    FROM job_results WHERE status = 'success' GROUP BY 1, 2 ORDER BY 1, 2`,
  perDay: `SELECT model_id, node_id::text, ((received_at AT TIME ZONE 'UTC')::date)::text AS day, min(received_at)::text AS f, max(received_at)::text AS l
    FROM job_results WHERE status = 'success' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
};
export const STORED = {
  daily: `SELECT node_id::text, day::text, points::float8 AS points, successes FROM node_daily_points ORDER BY 1, 2`,
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
