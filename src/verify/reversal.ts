// Taking points back: the results of fake work turn `reversed`, once each — the ledger
// point_reversals is keyed by job id — and every aggregate the reads are served from is made
// to match in the same statement, so daily_points and unique_nodes equal a recomputation from
// job_results and point_reversals before and after. What is reversed: a node's successes since
// a time (a suspension: its evidence window), and single jobs (the answer a strike is about).
//
// Each reversal is an entry of the points ledger (docs/ledger.md) on its ledger day: the day of
// the credit it takes back while that day is open, else the day it is made (a closed day never
// changes). point_reversals.day is that day, and so is the node_daily_points row it lowers: a
// late reversal lowers today's points. Whether the credit's day is closed is read from
// ledger_state FOR SHARE in this statement: a close holds that row FOR UPDATE while it
// re-counts its day and commits (src/ledger/close.ts), so this statement either commits before
// the close counts (and the close, seeing its day changed, computes it again) or waits and
// then reads the day closed (a locking read returns the newest committed row).
import { sql, type Queryable } from '../db/database.js';

// What is reversed: $1 node ids and $2 how far back from now, in seconds, their successes go
// (parallel arrays), and $3 job ids whoever did them.
const CHOSEN = `SELECT r.job_id FROM unnest($1::bigint[], $2::float8[]) AS t(node_id, back)
      JOIN job_results r ON r.node_id = t.node_id AND r.status = 'success' AND r.received_at >= now() - make_interval(secs => t.back)
    UNION
    SELECT unnest($3::text[])`;

// First, in a statement of its own, the rows REVERSE rewrites from its snapshot are locked (same
// $1..$3): the daily rows of the victims' nodes on the victims' days and today (made, at 0, where
// there is none yet), and their roster rows. REVERSE decides per row from its snapshot whether
// to lower it or delete it; a credit of the same node committing meanwhile (its statement saw
// the node in good standing, so it raced with a suspension, or any report beside a strike)
// would make that decision stale: a DELETE whose row changed under it is skipped, and the
// victims' points stayed (seen: a suspended node kept 2 points). With the rows locked first,
// such a credit either committed before (and REVERSE's snapshot shows it) or waits until this
// transaction ends. Credits lock the daily row, so this also holds them off rows that are only
// created later today. Left: a node with no success in the window, one of whose reports
// commits between this statement and REVERSE while a second is in flight (two reports inside
// one round trip of the moment a node with nothing to take back is suspended).
const LOCK = sql(
  'verify_reverse_lock',
  `WITH chosen AS (${CHOSEN}),
  hit AS (
    SELECT r.node_id, r.model_id, (r.received_at AT TIME ZONE 'UTC')::date AS day
    FROM job_results r JOIN chosen c ON r.job_id = c.job_id WHERE r.status = 'success'),
  daily AS (
    INSERT INTO node_daily_points AS d (node_id, day, points, successes)
    SELECT node_id, day, 0, 0 FROM (SELECT node_id, day FROM hit UNION SELECT node_id, (now() AT TIME ZONE 'UTC')::date FROM hit) k
    ORDER BY node_id, day
    ON CONFLICT (node_id, day) DO UPDATE SET points = d.points
    RETURNING d.node_id, d.day),
  overall AS (
    SELECT 1 FROM model_nodes mn WHERE (mn.model_id, mn.node_id) IN (SELECT model_id, node_id FROM hit)
    ORDER BY mn.model_id, mn.node_id FOR UPDATE),
  days AS (
    SELECT 1 FROM model_node_days md WHERE (md.model_id, md.node_id, md.day) IN (SELECT model_id, node_id, day FROM hit)
    ORDER BY md.model_id, md.node_id, md.day FOR UPDATE)
  -- The roster rows are counted only so that their locking CTEs run (one not read never does).
  SELECT coalesce(array_agg(node_id), '{}') AS nodes, coalesce(array_agg(day::text), '{}') AS days,
    (SELECT count(*) FROM overall)::int + (SELECT count(*) FROM days)::int AS roster_rows
  FROM daily`,
);
// Last, a daily row the lock made that nothing filled goes ($1 node ids, $2 days): no row holds nothing.
const LOCKED_EMPTY = sql(
  'verify_reverse_empty',
  `DELETE FROM node_daily_points d
  USING unnest($1::bigint[], $2::date[]) AS k(node_id, day)
  WHERE d.node_id = k.node_id AND d.day = k.day AND d.points = 0 AND d.successes = 0`,
);

// Same $1..$3, and $4 the reason. The statement's snapshot still shows the victims as successes, so what
// remains of each touched (model, node) and (model, node, day) sets them aside by job id; rows
// left with nothing go. Models are locked in id order before their roster version moves, as
// results/credit.ts does, so the two never wait on each other in a cycle. A (node, day) row
// lowered by a late reversal is upserted (it may not exist yet today), never deleted, so it
// cannot race with a credit creating it; rows of open days lose exactly their own successes.
// A score check's credit (job_results.is_check) is taken off the day's check_points and checks
// as well (issue 55): the checks' part of a day stays the sum of its checks' credits.
const REVERSE = sql(
  'verify_reverse',
  `WITH chosen AS (${CHOSEN}),
  victims AS (
    UPDATE job_results r SET status = 'reversed' FROM chosen c WHERE r.job_id = c.job_id AND r.status = 'success'
    RETURNING r.job_id, r.node_id, r.model_id, r.points, (r.received_at AT TIME ZONE 'UTC')::date AS day, r.is_check),
  closed AS (SELECT closed_through FROM ledger_state FOR SHARE),
  placed AS (
    SELECT v.*, CASE WHEN c.closed_through IS NULL OR v.day > c.closed_through THEN v.day
      ELSE greatest((now() AT TIME ZONE 'UTC')::date, c.closed_through + 1) END AS ledger_day
    FROM victims v CROSS JOIN closed c),
  ledger AS (
    INSERT INTO point_reversals (job_id, node_id, model_id, points, day, reason)
    SELECT job_id, node_id, model_id, points, ledger_day, $4::text FROM placed),
  per_day AS (
    SELECT node_id, ledger_day AS day, sum(points) AS points, (count(*) FILTER (WHERE ledger_day = day))::int AS n, bool_or(ledger_day <> day) AS late,
      coalesce(sum(points) FILTER (WHERE is_check), 0) AS check_points, (count(*) FILTER (WHERE ledger_day = day AND is_check))::int AS checks
    FROM placed GROUP BY node_id, ledger_day),
  daily_left AS (
    UPDATE node_daily_points d SET points = d.points - p.points, successes = d.successes - p.n,
      check_points = d.check_points - p.check_points, checks = d.checks - p.checks
    FROM per_day p WHERE NOT p.late AND d.node_id = p.node_id AND d.day = p.day AND NOT (d.successes = p.n AND d.points = p.points)),
  daily_gone AS (
    DELETE FROM node_daily_points d USING per_day p
    WHERE NOT p.late AND d.node_id = p.node_id AND d.day = p.day AND d.successes = p.n AND d.points = p.points),
  daily_late AS (
    INSERT INTO node_daily_points (node_id, day, points, successes, check_points, checks)
    SELECT node_id, day, -points, -n, -check_points, -checks FROM per_day WHERE late ORDER BY node_id, day
    ON CONFLICT (node_id, day) DO UPDATE
      SET points = node_daily_points.points + EXCLUDED.points, successes = node_daily_points.successes + EXCLUDED.successes,
        check_points = node_daily_points.check_points + EXCLUDED.check_points, checks = node_daily_points.checks + EXCLUDED.checks),
  remaining AS (
    SELECT t.model_id, t.node_id,
      (SELECT r.received_at FROM job_results r WHERE r.model_id = t.model_id AND r.node_id = t.node_id AND r.status = 'success'
        AND r.job_id NOT IN (SELECT job_id FROM victims) ORDER BY r.received_at LIMIT 1) AS f,
      (SELECT r.received_at FROM job_results r WHERE r.model_id = t.model_id AND r.node_id = t.node_id AND r.status = 'success'
        AND r.job_id NOT IN (SELECT job_id FROM victims) ORDER BY r.received_at DESC LIMIT 1) AS l
    FROM (SELECT DISTINCT model_id, node_id FROM victims) t),
  remaining_days AS (
    SELECT t.model_id, t.node_id, t.day,
      (SELECT r.received_at FROM job_results r WHERE r.model_id = t.model_id AND r.node_id = t.node_id AND r.status = 'success'
        AND r.received_at >= t.day::timestamp AT TIME ZONE 'UTC' AND r.received_at < (t.day + 1)::timestamp AT TIME ZONE 'UTC'
        AND r.job_id NOT IN (SELECT job_id FROM victims) ORDER BY r.received_at LIMIT 1) AS f,
      (SELECT r.received_at FROM job_results r WHERE r.model_id = t.model_id AND r.node_id = t.node_id AND r.status = 'success'
        AND r.received_at >= t.day::timestamp AT TIME ZONE 'UTC' AND r.received_at < (t.day + 1)::timestamp AT TIME ZONE 'UTC'
        AND r.job_id NOT IN (SELECT job_id FROM victims) ORDER BY r.received_at DESC LIMIT 1) AS l
    FROM (SELECT DISTINCT model_id, node_id, day FROM victims) t),
  overall_set AS (
    UPDATE model_nodes mn SET first_success_at = x.f, last_success_at = x.l FROM remaining x
    WHERE mn.model_id = x.model_id AND mn.node_id = x.node_id AND x.f IS NOT NULL),
  overall_gone AS (
    DELETE FROM model_nodes mn USING remaining x WHERE mn.model_id = x.model_id AND mn.node_id = x.node_id AND x.f IS NULL),
  days_set AS (
    UPDATE model_node_days d SET first_success_at = x.f, last_success_at = x.l FROM remaining_days x
    WHERE d.model_id = x.model_id AND d.node_id = x.node_id AND d.day = x.day AND x.f IS NOT NULL),
  days_gone AS (
    DELETE FROM model_node_days d USING remaining_days x WHERE d.model_id = x.model_id AND d.node_id = x.node_id AND d.day = x.day AND x.f IS NULL),
  -- The caches of older days and of rosters reload (repositories/points.ts, repositories/model-roster.ts).
  bumped AS (SELECT id FROM models WHERE id IN (SELECT model_id FROM victims) ORDER BY id FOR NO KEY UPDATE),
  roster AS (UPDATE models SET roster_version = roster_version + 1 WHERE id IN (SELECT id FROM bumped)),
  history AS (UPDATE points_history SET version = version + 1 WHERE EXISTS (SELECT 1 FROM victims))
  SELECT count(*)::int AS results, coalesce(sum(points), 0)::float8 AS points FROM victims`,
);

export interface Reversed {
  results: number;
  points: number;
}

/**
 * Reverses each node's successes of the last `seconds`, and those of the given jobs; answers how
 * many and how many points. Three statements: `db` must be a transaction.
 */
export async function reverse(
  db: Queryable,
  which: { nodes?: { nodeId: number; seconds: number }[]; jobIds?: string[] },
  reason: string,
): Promise<Reversed> {
  const nodes = which.nodes ?? [];
  const jobIds = which.jobIds ?? [];
  if (nodes.length === 0 && jobIds.length === 0) return { results: 0, points: 0 };
  const chosen = [nodes.map((s) => s.nodeId), nodes.map((s) => s.seconds), jobIds];
  const [locked] = await db.query<{ nodes: number[]; days: string[] }>(LOCK, chosen);
  const [row] = await db.query<Reversed>(REVERSE, [...chosen, reason]);
  if (locked!.nodes.length > 0) await db.query(LOCKED_EMPTY, [locked!.nodes, locked!.days]);
  return row!;
}
