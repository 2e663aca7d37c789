// Daily points of nodes, served from node_daily_points only, by an index range bounded by the
// window: the cost depends on the number of days asked for, never on how much history the
// node has. The database says which day is today (UTC, its clock stamps the reports), fills
// the days without points with 0 and writes the response's JSON itself: under load, building
// thousands of small objects in the server and serialising them again cost more than the
// query. One statement answers many requests (db/batcher.ts); each asks by node name, so a
// reader key's name lookup costs no round trip of its own.
import { sql, type Queryable } from '../db/database.js';
import { Batcher, type BatcherOptions } from '../db/batcher.js';

export interface DayPoints { date: string; points: number }
export interface PointsQuery { nodeName: string; lastDays: number }

// $1 names, $2 last_days (same length), $3 today for tests (NULL: the database's UTC day).
// Per request: the node by its unique name (OFFSET 0 keeps that lookup from being inlined
// and run again), then its days in the window, oldest first, as a JSON array
// [{"date":"YYYY-MM-DD","points":n}, …]; float8 text is valid JSON (shortest exact form).
export const DAILY_POINTS_SQL = sql('points_daily', `SELECT q.i::int AS i, q.node_id IS NOT NULL AS found, (
    SELECT '[' || string_agg('{"date":"' || (b.today - k) || '","points":' || coalesce(p.points, 0)::float8 || '}', ',' ORDER BY k DESC) || ']'
    FROM generate_series(0, q.last_days - 1) AS k
    LEFT JOIN (
      SELECT day, points FROM node_daily_points
      WHERE node_id = q.node_id AND day BETWEEN b.today - (q.last_days - 1) AND b.today) p ON p.day = b.today - k
  ) AS days
  FROM (SELECT coalesce($3::date, (now() AT TIME ZONE 'UTC')::date) AS today) b
  CROSS JOIN LATERAL (
    SELECT u.i, u.last_days, (SELECT id FROM nodes WHERE name = u.name) AS node_id
    FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS u(name, last_days, i)
    OFFSET 0) q`);

/**
 * Each query's days as the response's JSON text (undefined: no such node). `today`
 * (YYYY-MM-DD) is for tests; by default today is the database's current UTC day.
 */
export async function dailyPointsJson(db: Queryable, queries: readonly PointsQuery[], today?: string): Promise<(string | undefined)[]> {
  const rows = await db.query<{ i: number; found: boolean; days: string }>(DAILY_POINTS_SQL, [queries.map((q) => q.nodeName), queries.map((q) => q.lastDays), today ?? null]);
  const out: (string | undefined)[] = queries.map(() => undefined);
  for (const r of rows) if (r.found) out[r.i - 1] = r.days;
  return out;
}

/** The same as objects, for callers other than the HTTP route. */
export async function dailyPoints(db: Queryable, nodeName: string, lastDays: number, today?: string): Promise<DayPoints[] | undefined> {
  const [json] = await dailyPointsJson(db, [{ nodeName, lastDays }], today);
  return json === undefined ? undefined : (JSON.parse(json) as DayPoints[]);
}

export const POINTS_BATCH: BatcherOptions = { maxBatch: 64, maxInFlight: 4 };

/** Concurrent requests of one server share statements. */
export class PointsLoader {
  private readonly batcher: Batcher<PointsQuery, string | undefined>;
  constructor(db: Queryable, opts: BatcherOptions = POINTS_BATCH) {
    this.batcher = new Batcher((queries) => dailyPointsJson(db, queries), opts);
  }

  /** A node's last `lastDays` days as JSON text; undefined when no node has that name. */
  loadJson(nodeName: string, lastDays: number): Promise<string | undefined> {
    return this.batcher.load({ nodeName, lastDays });
  }
}
