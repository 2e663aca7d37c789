// Daily points of a node, served from node_daily_points only: the cost depends on the number
// of days asked for, never on how many results the node has.
import { sql, type Queryable } from '../db/database.js';

export interface DayPoints { date: string; points: number }

// The index range is bounded by the window, so a node with years of history costs the same
// as a new one; days without a row come out as 0.
export const DAILY_POINTS_SQL = sql('points_daily', `WITH bounds AS (
    SELECT coalesce($3::date, (now() AT TIME ZONE 'UTC')::date) AS today
  ), p AS (
    SELECT day, points FROM node_daily_points, bounds
    WHERE node_id = $1::bigint AND day BETWEEN bounds.today - ($2::integer - 1) AND bounds.today
  )
  SELECT d.day::text AS date, coalesce(p.points, 0)::float8 AS points
  FROM bounds, generate_series(0, $2::integer - 1) g
  CROSS JOIN LATERAL (SELECT (bounds.today - g)::date AS day) d
  LEFT JOIN p ON p.day = d.day
  ORDER BY d.day`);

/** `today` (YYYY-MM-DD) is for tests; by default today is the database's current UTC day. */
export async function dailyPoints(db: Queryable, nodeId: number, lastDays: number, today?: string): Promise<DayPoints[]> {
  return db.query<DayPoints>(DAILY_POINTS_SQL, [nodeId, lastDays, today ?? null]);
}
