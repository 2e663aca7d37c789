// What an operator sees of a node's verification (ins node audit NAME, GET /network/nodes/NAME):
// its standing and why — the strikes with their evidence, the points taken back — and how
// often its work was checked and found right.
import { sql, type Queryable } from '../db/database.js';
import { STRIKE_KINDS, type Standing, type StrikeKind } from './standing.js';
import { checkRate, type CheckRateConfig } from './check-rate.js';

/** What the views need of the configuration: the evidence window (s) and the check rate's settings. */
export type AuditViewConfig = CheckRateConfig & { evidenceWindow: number };

export interface NodeAudit {
  name: string;
  standing: Standing;
  since: string | null;
  reinstated_at: string | null;
  agreements: number;
  /** Agreements in a row: since its last strike, disagreement or reinstatement. */
  clean_streak: number;
  /** The share of its jobs checked now (check-rate.ts): VERIFY_SHARE while new, falling with clean_streak to VERIFY_FLOOR; 1 on probation. */
  check_rate: number;
  /** Strikes that count now (within the window, since any reinstatement). */
  strikes_counting: number;
  strikes: { at: string; kind: string; job_id: string; evidence: Record<string, unknown> }[];
  reversals: { results: number; points: number; by_reason: Record<string, number> };
  /** The node's done jobs of the window that another node ran too. */
  checked_jobs: number;
}

const ISO = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`;
// Over nodes n LEFT JOIN node_standing s, $2 the evidence window (s): the strikes that count now.
const STRIKES_COUNTING = `(SELECT count(*)::int FROM node_strikes k WHERE k.node_id = n.id
      AND k.at > greatest(now() - make_interval(secs => $2::float8), coalesce(s.reinstated_at, '-infinity')))`;
// $1 the node's name, $2 the evidence window (s).
const AUDIT = sql(
  'verify_node_audit',
  `SELECT n.name, coalesce(s.state, 'trusted') AS standing, ${ISO('s.changed_at')} AS since,
    ${ISO('s.reinstated_at')} AS reinstated_at, coalesce(s.agreements, 0) AS agreements, coalesce(s.clean_streak, 0) AS clean_streak,
    ${STRIKES_COUNTING} AS strikes_counting,
    coalesce((SELECT json_agg(x ORDER BY x.at DESC) FROM (
      SELECT ${ISO('k.at')} AS at, k.kind, k.job_id::text AS job_id, k.evidence FROM node_strikes k WHERE k.node_id = n.id ORDER BY k.at DESC LIMIT 50) x), '[]') AS strikes,
    json_build_object(
      'results', (SELECT count(*)::int FROM point_reversals r WHERE r.node_id = n.id),
      'points', (SELECT coalesce(sum(points), 0)::float8 FROM point_reversals r WHERE r.node_id = n.id),
      'by_reason', coalesce((SELECT json_object_agg(reason, points) FROM (
        SELECT reason, sum(points)::float8 AS points FROM point_reversals r WHERE r.node_id = n.id GROUP BY reason) g), '{}')) AS reversals,
    (SELECT count(*)::int FROM jobs j WHERE j.node_id = n.id AND j.state = 'done' AND j.finished_at > now() - make_interval(secs => $2::float8)
      AND EXISTS (SELECT 1 FROM jobs c WHERE c.verify_of = coalesce(j.verify_of, j.id) AND c.state = 'done' AND c.id <> j.id)) AS checked_jobs
  FROM nodes n LEFT JOIN node_standing s ON s.node_id = n.id WHERE n.name = $1::text`,
);

/** A rate as the views show it: 4 decimals. */
const shown = (standing: Standing, run: number, c: CheckRateConfig): number => Math.round(checkRate({ standing, run }, c) * 10_000) / 10_000;

/** The node's verification record; undefined when no node has that name. */
export async function nodeAudit(db: Queryable, name: string, c: AuditViewConfig): Promise<NodeAudit | undefined> {
  const [row] = await db.query<Omit<NodeAudit, 'check_rate'>>(AUDIT, [name, c.evidenceWindow]);
  return row && { ...row, check_rate: shown(row.standing, row.clean_streak, c) };
}

/** A node's points of one UTC day, answers and score checks apart. */
export interface PointsDay {
  day: string;
  points: number;
  answers: number;
  checks: number;
  check_jobs: number;
}

export type NodeStanding = Pick<NodeAudit, 'standing' | 'strikes_counting' | 'check_rate'> & {
  points_reversed: number;
  agreements_in_a_row: number;
  points_days: PointsDay[];
};

// The node view's part of the record (a page polls it): no evidence, and none of the audit's
// scan of the node's checked jobs. $1 the node's name, $2 the evidence window (s). With its
// points of the last 7 UTC days, answers and score checks apart (issue 55: checks are priced by
// their work, docs/verification.md): seven rows of node_daily_points by its key.
const STANDING = sql(
  'verify_node_standing',
  `SELECT coalesce(s.state, 'trusted') AS standing, ${STRIKES_COUNTING} AS strikes_counting, coalesce(s.clean_streak, 0) AS agreements_in_a_row,
    (SELECT coalesce(sum(r.points), 0)::float8 FROM point_reversals r WHERE r.node_id = n.id) AS points_reversed,
    (SELECT json_agg(json_build_object('day', d.day::text, 'points', coalesce(p.points, 0)::float8,
        'answers', coalesce(p.points - p.check_points, 0)::float8, 'checks', coalesce(p.check_points, 0)::float8, 'check_jobs', coalesce(p.checks, 0))
      ORDER BY d.day)
      FROM generate_series(0, 6) AS g(back) CROSS JOIN LATERAL (SELECT (now() AT TIME ZONE 'UTC')::date - g.back AS day) d
      LEFT JOIN node_daily_points p ON p.node_id = n.id AND p.day = d.day) AS points_days
  FROM nodes n LEFT JOIN node_standing s ON s.node_id = n.id WHERE n.name = $1::text`,
);

/** The node's standing, strikes counting, check rate and points taken back; undefined when no node has that name. */
export async function nodeStanding(db: Queryable, name: string, c: AuditViewConfig): Promise<NodeStanding | undefined> {
  const [row] = await db.query<Omit<NodeStanding, 'check_rate'>>(STANDING, [name, c.evidenceWindow]);
  return row && { ...row, check_rate: shown(row.standing, row.agreements_in_a_row, c) };
}

export interface VerificationSummary {
  /** Of the jobs done in the last minute, the share the coordinator made to check nodes (copies and probes). */
  checked_share: number;
  strikes_24h: Record<StrikeKind, number>;
  nodes_on_probation: number;
  nodes_suspended: number;
}

const SUMMARY = sql(
  'verify_summary',
  `SELECT
    coalesce((SELECT (count(*) FILTER (WHERE kind <> 'user'))::float8 / nullif(count(*), 0) FROM jobs
      WHERE finished_at > now() - interval '1 minute' AND state = 'done'), 0) AS checked_share,
    (SELECT json_object_agg(k.kind, (SELECT count(*)::int FROM node_strikes s WHERE s.at > now() - interval '1 day' AND s.kind = k.kind))
      FROM unnest($1::text[]) AS k(kind)) AS strikes_24h,
    (SELECT count(*)::int FROM node_standing WHERE state = 'probation') AS nodes_on_probation,
    (SELECT count(*)::int FROM node_standing WHERE state = 'suspended') AS nodes_suspended`,
);

/** The network's verification at a glance (the dashboard). */
export async function verificationSummary(db: Queryable): Promise<VerificationSummary> {
  const [row] = await db.query<VerificationSummary>(SUMMARY, [STRIKE_KINDS]);
  return { ...row!, checked_share: Math.round(row!.checked_share * 1000) / 1000 };
}
