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
// Strikes, agreements and reinstating are transitions of the node lifecycle (src/nodes/states.ts).
//
// On probation every temperature-0 job of the node is run again by another node; trusted, a
// share that falls with its run of agreements (check-rate.ts). A suspended
// node gets no jobs and its answers are not taken; its points of the evidence window are
// reversed (verify/reversal.ts). Reinstating forgets the strikes before it, not the reversals.
import { sql, type Queryable } from '../db/database.js';
import type { VerifyConfig } from '../config-verify.js';
import type { NodeOutcome } from '../nodes/outcome.js';
import { reverse, type Reversed } from './reversal.js';
import { agreeNodes, strikeNode } from '../nodes/sql/standing.js';

// The standings and strike kinds are the node lifecycle's (src/nodes/states.ts).
import type { Standing, StrikeKind } from '../nodes/states.js';
export { STANDINGS, STRIKE_KINDS, type Standing, type StrikeKind } from '../nodes/states.js';

// Nodes never judged are trusted.
const COUNTS = sql(
  'verify_standings',
  `SELECT s.state, count(*)::int AS n FROM nodes n LEFT JOIN LATERAL (
    SELECT coalesce((SELECT r.state FROM node_standing r WHERE r.node_id = n.id), 'trusted') AS state) s ON true
  GROUP BY s.state`,
);

/** Where verification keeps what its node transitions did, to apply and count once committed (verify/auditor.ts AuditReport). */
export interface StandingLog {
  strikes: { kind: StrikeKind; nodeId: number }[];
  /** The node lifecycle's outcomes of the strikes and agreements, as their statements announced them. */
  nodes: NodeOutcome[];
}

/**
 * A strike (the node lifecycle's transition, src/nodes/sql/standing.ts), announced as server
 * `server`'s and logged with its outcome (struck, or suspended); the verifier applies that to
 * the server's node lifecycle once the caller's transaction commits (verifier.ts told()). True
 * when this strike suspended the node.
 */
export async function strike(
  db: Queryable,
  s: { nodeId: number; jobId: string; kind: StrikeKind; evidence: Record<string, unknown> },
  limits: { windowSeconds: number; strikesToSuspend: number; server?: string },
  log: StandingLog,
): Promise<boolean> {
  const { outcome } = await strikeNode(db, s.nodeId, s.jobId, s.kind, s.evidence, limits.windowSeconds, limits.strikesToSuspend, limits.server);
  log.strikes.push({ kind: s.kind, nodeId: s.nodeId });
  log.nodes.push(outcome);
  return outcome.change === 'suspended';
}

/**
 * A strike at the configured limits that takes the node's points of the evidence window back
 * when it suspends the node (verify/reversal.ts): the give-ups' and failures' strikes.
 */
export async function strikeAndReverse(
  db: Queryable,
  s: { nodeId: number; jobId: string; kind: StrikeKind; evidence: Record<string, unknown> },
  v: VerifyConfig,
  server: string,
  log: StandingLog & { suspended: ({ nodeId: number } & Reversed)[]; reversedPoints: number },
): Promise<void> {
  if (!(await strike(db, s, { windowSeconds: v.evidenceWindow, strikesToSuspend: v.strikesToSuspend, server }, log))) return;
  const r = await reverse(db, { nodes: [{ nodeId: s.nodeId, seconds: v.evidenceWindow }] }, 'suspended');
  log.suspended.push({ nodeId: s.nodeId, ...r });
  log.reversedPoints += r.points;
}

/**
 * One agreement per entry of nodeIds (a node may appear several times), and the run of
 * agreements of each of `doubted` ends (check-rate.ts); the probations it ends are logged as
 * strikes are.
 */
export async function agree(
  db: Queryable,
  nodeIds: number[],
  probationAgreements: number,
  log: StandingLog,
  server = '',
  doubted: number[] = [],
): Promise<void> {
  log.nodes.push(...(await agreeNodes(db, nodeIds, probationAgreements, server, doubted)));
}

/** How many nodes stand where. */
export async function standingCounts(db: Queryable): Promise<Record<Standing, number>> {
  const out: Record<Standing, number> = { trusted: 0, probation: 0, suspended: 0 };
  for (const r of await db.query<{ state: Standing; n: number }>(COUNTS)) out[r.state] = r.n;
  return out;
}
