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
// Strikes and reinstating are transitions of the node lifecycle (src/nodes/states.ts).
//
// On probation every temperature-0 job of the node is run again by another node. A suspended
// node gets no jobs and its answers are not taken; its points of the evidence window are
// reversed (verify/reversal.ts). Reinstating forgets the strikes before it, not the reversals.
import { sql, type Queryable } from '../db/database.js';
import { strikeNode } from '../nodes/sql/standing.js';

// The standings and strike kinds are the node lifecycle's (src/nodes/states.ts).
import type { Standing, StrikeKind } from '../nodes/states.js';
export { STANDINGS, STRIKE_KINDS, type Standing, type StrikeKind } from '../nodes/states.js';

// $1 node ids (a node once per agreement), $2 agreements in a row that end a probation.
const AGREE = sql(
  'verify_agree',
  `INSERT INTO node_standing AS r (node_id, agreements, clean_streak)
  SELECT node_id, count(*)::int, count(*)::int FROM unnest($1::bigint[]) AS a(node_id) GROUP BY node_id ORDER BY node_id
  ON CONFLICT (node_id) DO UPDATE SET agreements = r.agreements + EXCLUDED.agreements, clean_streak = r.clean_streak + EXCLUDED.clean_streak,
    state = CASE WHEN r.state = 'probation' AND r.clean_streak + EXCLUDED.clean_streak >= $2::int THEN 'trusted' ELSE r.state END,
    changed_at = CASE WHEN r.state = 'probation' AND r.clean_streak + EXCLUDED.clean_streak >= $2::int THEN now() ELSE r.changed_at END`,
);

// Nodes never judged are trusted.
const COUNTS = sql(
  'verify_standings',
  `SELECT s.state, count(*)::int AS n FROM nodes n LEFT JOIN LATERAL (
    SELECT coalesce((SELECT r.state FROM node_standing r WHERE r.node_id = n.id), 'trusted') AS state) s ON true
  GROUP BY s.state`,
);

/**
 * A strike (the node lifecycle's transition, src/nodes/sql/standing.ts), announced as server
 * `server`'s: the standing before and after. The verifier applies it (struck, or suspended) to
 * that server's node lifecycle once the caller's transaction commits (verifier.ts told()).
 */
export async function strike(
  db: Queryable,
  nodeId: number,
  jobId: string,
  kind: StrikeKind,
  evidence: Record<string, unknown>,
  windowSeconds: number,
  strikesToSuspend: number,
  server = '',
): Promise<{ before: Standing; after: Standing }> {
  const { before, after } = await strikeNode(db, nodeId, jobId, kind, evidence, windowSeconds, strikesToSuspend, server);
  return { before, after };
}

/** One agreement per entry of nodeIds (a node may appear several times). */
export async function agree(db: Queryable, nodeIds: number[], probationAgreements: number): Promise<void> {
  if (nodeIds.length > 0) await db.query(AGREE, [nodeIds, probationAgreements]);
}

/** How many nodes stand where. */
export async function standingCounts(db: Queryable): Promise<Record<Standing, number>> {
  const out: Record<Standing, number> = { trusted: 0, probation: 0, suspended: 0 };
  for (const r of await db.query<{ state: Standing; n: number }>(COUNTS)) out[r.state] = r.n;
  return out;
}
