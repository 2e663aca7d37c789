// Daily points of a node, served from node_daily_points only, by an index range bounded by the
// window: the cost depends on the number of days asked for, never on how much history the
// node has. The database says which day is today (UTC, its clock stamps the reports) and
// returns the days that have points; the days between are filled with 0 here.
import { sql, type Queryable } from '../db/database.js';

export interface DayPoints { date: string; points: number }

export const DAILY_POINTS_SQL = sql('points_daily', `SELECT b.today::text AS today, p.day::text AS day, p.points::float8 AS points
  FROM (SELECT coalesce($3::date, (now() AT TIME ZONE 'UTC')::date) AS today) b
  LEFT JOIN node_daily_points p
    ON p.node_id = $1::bigint AND p.day BETWEEN b.today - ($2::integer - 1) AND b.today`);

const DAY_MS = 86_400_000;

/** `today` (YYYY-MM-DD) is for tests; by default today is the database's current UTC day. */
export async function dailyPoints(db: Queryable, nodeId: number, lastDays: number, today?: string): Promise<DayPoints[]> {
  const rows = await db.query<{ today: string; day: string | null; points: number | null }>(DAILY_POINTS_SQL, [nodeId, lastDays, today ?? null]);
  const byDay = new Map(rows.filter((r) => r.day !== null).map((r) => [r.day!, r.points!]));
  const last = Date.parse(`${rows[0]!.today}T00:00:00Z`);
  const out: DayPoints[] = [];
  for (let i = lastDays - 1; i >= 0; i--) {
    const date = new Date(last - i * DAY_MS).toISOString().slice(0, 10);
    out.push({ date, points: byDay.get(date) ?? 0 });
  }
  return out;
}
