// A node's lifecycle, one frozen set of states, and the transitions the coordinator makes, each
// one statement of src/nodes/sql/ run by nodes/lifecycle.ts (the job's: src/jobs/states.ts). A
// node's state is where its access stands (nodes.disabled_at) and its standing
// (node_standing.state, src/verify/standing.ts): disabled wins over any standing.
//
//              node add                      strike (a strike kind of          VERIFY_STRIKES
//   (none) ─────────────────▶ trusted ─────▶ verify/standing.ts) ─▶ probation ─────────────────▶ suspended
//          sql/add.ts            ▲  ▲        sql/standing.ts            │       strikes (the strike
//                                │  │                                   │       that reaches them:
//                                │  └─── VERIFY_PROBATION_AGREEMENTS ───┘       "suspend")
//                                │       agreements: agree ("cleared"),           │
//                                │       sql/standing.ts                          │
//                                └────────── restore (ins node reinstate) ◀───────┘
//                                            sql/standing.ts
//
//   trusted / probation / suspended ── disable (sql/access.ts) ──▶ disabled ── enable ──▶ its standing again
//
// Beside the state, two transitions that leave it as it is:
//   rotate key (sql/rotate.ts): the old key, its sessions and its secret checks stop working;
//   register / deregister (sql/sessions.ts): a worker session of the node opens or ends, and
//   declare (sql/declare.ts) changes the models a session serves.
//
// What each state allows: trusted and probation nodes register, declare models and take jobs
// (on probation, their answers are checked: docs/verification.md); a suspended node's key
// still works but its sessions serve nothing (no leases, no hand-offs, no reports taken); a
// disabled node's key gets 403 and its sessions are void. Ending access (disable, rotate key,
// deregister) hands the leases it held back to the queue once the change committed
// (nodes/lifecycle.ts): ended first, so that no new lease can reach it.

/** A node's standing (node_standing.state, CHECK in migrations/0006_verification.sql; src/verify/standing.ts). */
export const STANDINGS = Object.freeze(['trusted', 'probation', 'suspended'] as const);
export type Standing = (typeof STANDINGS)[number];

/** What a strike is for (node_strikes.kind; docs/verification.md). */
// impostor (issue 31): token-level checks found the node's answers unlike its declared model's (verify/scores.ts).
// false_request_error (issue 29): the node said a job's request was at fault, and another node answered it (verify/request-errors.ts).
// false_score (issue 53): two other scorers of an answer contradicted the node's scores of it (verify/scores.ts).
export const STRIKE_KINDS = Object.freeze([
  'disagreement',
  'replay',
  'too_fast',
  'give_up',
  'failure',
  'impostor',
  'false_request_error',
  'false_score',
] as const);
export type StrikeKind = (typeof STRIKE_KINDS)[number];

export const NODE_STATES = Object.freeze(['trusted', 'probation', 'suspended', 'disabled'] as const);
export type NodeState = (typeof NODE_STATES)[number];

/** Every transition, by the name its outcome carries (nodes/outcome.ts); `keys`: a reader or user key changed (repositories/api-keys.ts). */
export const NODE_CHANGES = Object.freeze([
  'added',
  'disabled',
  'enabled',
  'rotated',
  'registered',
  'deregistered',
  'declared',
  'struck',
  'suspended',
  'cleared',
  'restored',
  'keys',
] as const);
export type NodeChange = (typeof NODE_CHANGES)[number];
