// Daily points of a node, served from node_daily_points only: the cost depends on the number
// of days asked for, never on how many results the node has.
import { sql, type Queryable } from '../db/database.js';

export interface DayPoints { date: string; points: number }

export const DAILY_POINTS_SQL = sql('points_daily', `SELECT d.day::date::text AS date, coalesce(p.points, 0)::float8 AS points
  FROM generate_series(coalesce($3::date, (now() AT TIME ZONE 'UTC')::date) - ($2::integer - 1),
                       coalesce($3::date, (now() AT TIME ZONE 'UTC')::date), interval '1 day') AS d(day)
  LEFT JOIN node_daily_points p ON p.node_id = $1::bigint AND p.day = d.day::date
  ORDER BY d.day`);

/** `today` (YYYY-MM-DD) is for tests; by default today is the database's current UTC day. */
export async function dailyPoints(db: Queryable, nodeId: number, lastDays: number, today?: string): Promise<DayPoints[]> {
  return db.query<DayPoints>(DAILY_POINTS_SQL, [nodeId, lastDays, today ?? null]);
}
