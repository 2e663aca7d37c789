// A node's standing, one frozen set of states (mirrored by the CHECK of node_standing.state in
// migrations/0006_verification.sql), moved by the evidence the auditor finds:
//
//                 strike                    VERIFY_STRIKES strikes within
//     trusted ──────────────▶ probation ───────────────────────────────▶ suspended
//        ▲                        │           VERIFY_EVIDENCE_WINDOW          │
//        │  VERIFY_PROBATION_     │                                           │
//        └── AGREEMENTS agreements┘                                           │
//        │   in a row                                                         │
//        └──────────────────────────── ins node reinstate ◀───────────────────┘
//
// On probation every temperature-0 job of the node is run again by another node. A suspended
// node gets no jobs and its answers are not taken; its points of the evidence window are
// reversed (verify/reversal.ts). Reinstating forgets the strikes before it, not the reversals.
import { sql, type Queryable } from '../db/database.js';

export const STANDINGS = Object.freeze(['trusted', 'probation', 'suspended'] as const);
export type Standing = (typeof STANDINGS)[number];

// impostor (issue 31): token-level checks found the node's answers unlike its declared model's (verify/scores.ts).
export const STRIKE_KINDS = Object.freeze(['disagreement', 'replay', 'too_fast', 'give_up', 'failure', 'impostor'] as const);
export type StrikeKind = (typeof STRIKE_KINDS)[number];

// $1 node, $2 job, $3 kind, $4 evidence, $5 window (s), $6 strikes that suspend. Strikes count
// within the window and since the node was last reinstated. Answers the standing before and
// after.
const STRIKE = sql('verify_strike', `WITH recorded AS (
    INSERT INTO node_strikes (node_id, job_id, kind, evidence) VALUES ($1::bigint, $2::uuid, $3::text, $4::jsonb) RETURNING node_id),
  prior AS (SELECT state, reinstated_at FROM node_standing WHERE node_id = $1::bigint),
  counted AS (SELECT count(*)::int + 1 AS n FROM node_strikes s WHERE s.node_id = $1::bigint
    AND s.at > greatest(now() - make_interval(secs => $5::float8), coalesce((SELECT reinstated_at FROM prior), '-infinity'))),
  next AS (SELECT CASE WHEN (SELECT state FROM prior) = 'suspended' OR (SELECT n FROM counted) >= $6::int THEN 'suspended' ELSE 'probation' END AS state)
  INSERT INTO node_standing AS r (node_id, state, clean_streak, changed_at)
  SELECT $1::bigint, (SELECT state FROM next), 0, now() FROM recorded
  ON CONFLICT (node_id) DO UPDATE SET state = (SELECT state FROM next), clean_streak = 0,
    changed_at = CASE WHEN r.state <> (SELECT state FROM next) THEN now() ELSE r.changed_at END
  RETURNING coalesce((SELECT state FROM prior), 'trusted') AS before, r.state AS after`);

// $1 node ids (a node once per agreement), $2 agreements in a row that end a probation.
const AGREE = sql('verify_agree', `INSERT INTO node_standing AS r (node_id, agreements, clean_streak)
  SELECT node_id, count(*)::int, count(*)::int FROM unnest($1::bigint[]) AS a(node_id) GROUP BY node_id ORDER BY node_id
  ON CONFLICT (node_id) DO UPDATE SET agreements = r.agreements + EXCLUDED.agreements, clean_streak = r.clean_streak + EXCLUDED.clean_streak,
    state = CASE WHEN r.state = 'probation' AND r.clean_streak + EXCLUDED.clean_streak >= $2::int THEN 'trusted' ELSE r.state END,
    changed_at = CASE WHEN r.state = 'probation' AND r.clean_streak + EXCLUDED.clean_streak >= $2::int THEN now() ELSE r.changed_at END`);

const REINSTATE = sql('verify_reinstate', `UPDATE node_standing r SET state = 'trusted', clean_streak = 0, changed_at = now(), reinstated_at = now()
  FROM nodes n WHERE n.id = r.node_id AND n.name = $1::text AND r.state <> 'trusted' RETURNING r.node_id`);

// Nodes never judged are trusted.
const COUNTS = sql('verify_standings', `SELECT s.state, count(*)::int AS n FROM nodes n LEFT JOIN LATERAL (
    SELECT coalesce((SELECT r.state FROM node_standing r WHERE r.node_id = n.id), 'trusted') AS state) s ON true
  GROUP BY s.state`);

export async function strike(db: Queryable, nodeId: number, jobId: string, kind: StrikeKind, evidence: Record<string, unknown>, windowSeconds: number, strikesToSuspend: number): Promise<{ before: Standing; after: Standing }> {
  const [row] = await db.query<{ before: Standing; after: Standing }>(STRIKE, [nodeId, jobId, kind, JSON.stringify(evidence), windowSeconds, strikesToSuspend]);
  return row!;
}

/** One agreement per entry of nodeIds (a node may appear several times). */
export async function agree(db: Queryable, nodeIds: number[], probationAgreements: number): Promise<void> {
  if (nodeIds.length > 0) await db.query(AGREE, [nodeIds, probationAgreements]);
}

/** Back to trusted, strikes so far forgotten; false when no node of that name is on probation or suspended. */
export async function reinstate(db: Queryable, nodeName: string): Promise<boolean> {
  return (await db.query(REINSTATE, [nodeName])).length > 0;
}

/** How many nodes stand where. */
export async function standingCounts(db: Queryable): Promise<Record<Standing, number>> {
  const out: Record<Standing, number> = { trusted: 0, probation: 0, suspended: 0 };
  for (const r of await db.query<{ state: Standing; n: number }>(COUNTS)) out[r.state] = r.n;
  return out;
}
