// Daily points of nodes, served from node_daily_points only, by an index range bounded by the
// window: the cost depends on the number of days asked for, never on how much history the
// node has. The database says which day is today (UTC, its clock stamps the reports) and
// fills the days without points with 0.
//
// Under load the round trip and the rows cost more than anything else, so:
// - one statement answers many concurrent requests (db/batcher.ts), each asking by node
//   name, so a reader key's name lookup costs no round trip of its own;
// - each server keeps the older days of the nodes it was asked about. Reports through the
//   API only ever add to today — or to yesterday, when one commits just after midnight — so
//   days before yesterday change only through imports and explicit times, which bump
//   points_history.version. A request with those days cached reads only yesterday, today
//   and the version, in the same statement; if the version or today moved, it reads again
//   in full. So every answer is exact, also with several servers writing.
import { sql, type Queryable } from '../db/database.js';
import { Batcher, type BatcherOptions } from '../db/batcher.js';

export interface DayPoints {
  date: string;
  points: number;
}

interface Ask {
  nodeName: string;
  days: number;
}
/** points: the last `days` days, oldest first; undefined when no node has that name. */
interface Answer {
  today: string;
  version: string;
  points: number[] | undefined;
}

// $1 names, $2 numbers of days (same length), $3 today for tests (NULL: the database's UTC
// day). OFFSET 0 keeps the name lookup from being inlined and run again per day.
export const DAILY_POINTS_SQL = sql(
  'points_daily',
  `SELECT q.i::int AS i, b.today::text AS today,
    (SELECT version::text FROM points_history) AS version,
    CASE WHEN q.node_id IS NOT NULL THEN (
      SELECT array_agg(coalesce(p.points, 0)::float8 ORDER BY k DESC)
      FROM generate_series(0, q.days - 1) AS k
      LEFT JOIN (
        SELECT day, points FROM node_daily_points
        WHERE node_id = q.node_id AND day BETWEEN b.today - (q.days - 1) AND b.today) p ON p.day = b.today - k
    ) END AS points
  FROM (SELECT coalesce($3::date, (now() AT TIME ZONE 'UTC')::date) AS today) b
  CROSS JOIN LATERAL (
    SELECT u.i, u.days, (SELECT id FROM nodes WHERE name = u.name) AS node_id
    FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS u(name, days, i)
    OFFSET 0) q`,
);

async function fetchPoints(db: Queryable, asks: readonly Ask[], today?: string): Promise<Answer[]> {
  const rows = await db.query<{ i: number; today: string; version: string; points: number[] | null }>(DAILY_POINTS_SQL, [
    asks.map((a) => a.nodeName),
    asks.map((a) => a.days),
    today ?? null,
  ]);
  const out = new Array<Answer>(asks.length);
  for (const r of rows) out[r.i - 1] = { today: r.today, version: r.version, points: r.points?.map(Number) };
  return out;
}

const DAY_MS = 86_400_000;
/** Days that may still change: yesterday and today. */
const FRESH = 2;

/** The JSON of each of the last points.length days up to today, oldest first. */
function dayItems(today: string, points: readonly number[]): string[] {
  const last = Date.parse(`${today}T00:00:00Z`);
  return points.map((p, i) => {
    const date = new Date(last - (points.length - 1 - i) * DAY_MS).toISOString().slice(0, 10);
    return `{"date":"${date}","points":${p}}`;
  });
}

const TOTAL = sql(
  'points_total',
  `SELECT coalesce((SELECT sum(p.points) FROM node_daily_points p WHERE p.node_id = n.id), 0)::float8 AS total
  FROM nodes n WHERE n.name = $1::text`,
);

/** A node's points over all time; undefined when no node has that name. */
export async function nodeTotalPoints(db: Queryable, nodeName: string): Promise<number | undefined> {
  const [row] = await db.query<{ total: number }>(TOTAL, [nodeName]);
  return row?.total;
}

/** A node's settled days: `items` end the day before yesterday of `today`. */
interface Settled {
  today: string;
  version: string;
  items: string[];
}

export interface PointsLoaderOptions {
  batch?: BatcherOptions;
  /** Most settled days kept, over all nodes (about 60 bytes each). */
  maxItems?: number;
  /** Tests only: the day the database should take as today. */
  today?: () => string;
}

/** A node's daily points, as the response's JSON text; see the top of this file. */
export class PointsLoader {
  private readonly batcher: Batcher<Ask, Answer>;
  private readonly settled = new Map<string, Settled>();
  private items = 0;
  private readonly maxItems: number;

  constructor(
    private readonly db: Queryable,
    opts: PointsLoaderOptions = {},
  ) {
    this.batcher = new Batcher((asks) => fetchPoints(db, asks, opts.today?.()), opts.batch ?? { maxBatch: 64, maxInFlight: 4 });
    this.maxItems = opts.maxItems ?? 500_000;
  }

  /** A node's points over all time (GET /get_points); undefined when no node has that name. */
  total(nodeName: string): Promise<number | undefined> {
    return nodeTotalPoints(this.db, nodeName);
  }

  /** The last `lastDays` days, oldest first, as JSON; undefined when no node has that name. */
  async loadJson(nodeName: string, lastDays: number): Promise<string | undefined> {
    const cached = this.settled.get(nodeName);
    if (cached && lastDays > FRESH && cached.items.length >= lastDays - FRESH) {
      const fresh = await this.batcher.load({ nodeName, days: FRESH });
      if (!fresh.points) return undefined;
      if (fresh.version === cached.version && fresh.today === cached.today) {
        const older = cached.items.slice(cached.items.length - (lastDays - FRESH));
        return `[${[...older, ...dayItems(fresh.today, fresh.points)].join(',')}]`;
      }
    }
    const full = await this.batcher.load({ nodeName, days: lastDays });
    if (!full.points) return undefined;
    const all = dayItems(full.today, full.points);
    if (lastDays > FRESH) this.remember(nodeName, { today: full.today, version: full.version, items: all.slice(0, lastDays - FRESH) });
    return `[${all.join(',')}]`;
  }

  private remember(nodeName: string, s: Settled): void {
    const old = this.settled.get(nodeName);
    // Keep the longer of two equally current copies.
    if (old && old.today === s.today && old.version === s.version && old.items.length >= s.items.length) return;
    this.forget(nodeName);
    while (this.settled.size > 0 && this.items + s.items.length > this.maxItems) this.forget(this.settled.keys().next().value!);
    this.settled.set(nodeName, s);
    this.items += s.items.length;
  }

  private forget(nodeName: string): void {
    this.items -= this.settled.get(nodeName)?.items.length ?? 0;
    this.settled.delete(nodeName);
  }
}
