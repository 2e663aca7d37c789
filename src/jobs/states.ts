// A job's lifecycle, one frozen set of states (mirrored by the CHECK of jobs.state in
// migrations/0005_coordinator.sql) and the transitions the coordinator makes, each one
// statement of src/jobs/sql/ (run by jobs/lifecycle.ts):
//
//                 submit                  lease                    complete (success)
//   (none) ─────────────────────▶ queued ──────────────────▶ leased ─────────────────────▶ done
//           sql/submit.ts (or      ▲  │     sql/lease.ts        │   sql/complete.ts
//           straight to leased:    │  │                         │
//           a hand-off)            ├──┼─────────────────────────┤ give-up, sql/release.ts: the node deregistered,
//                                  │  │                         │ was disabled, asked for more than it holds, or
//                                  │  │                         │ hung up; no failure of the job
//                                  └──┼─────────────────────────┤ failure: an error report (sql/complete.ts) or
//                                     │                         │ the lease ran out (sql/sweep.ts): the node's
//                                     │                         │ fault, it is kept off the job; while
//                                     │                         │ failures < MAX_ATTEMPTS
//                                     │                         ├──▶ failed    the same, at MAX_ATTEMPTS failures
//                                     │                         │              (each another node's), or queued
//                                     │                         │              with no node left that may take
//                                     │                         │              it (sql/sweep.ts, NO_NODE_GRACE)
//                                     ├─────────────────────────┼──▶ expired   past the deadline (sql/sweep.ts)
//                                     └─────────────────────────┴──▶ canceled  by its owner or an operator (sql/cancel.ts)
//
//   queue checks (sql/queue-checks.ts): verification's copies and probes start queued.
//
// A lease that ends without the job done hands what it streamed to the client on to the next
// lease as the answer's beginning (jobs.streamed, job_data.answer_prefix).
// done, failed, expired and canceled are final. A job is leased to one node at a time; each
// lease is one attempt (job_leases), ended with one of LEASE_OUTCOMES. A job is done exactly
// once, by exactly one node, and that node is credited exactly once (the credit part of
// sql/complete.ts, results/credit.ts).

export const JOB_STATES = Object.freeze(['queued', 'leased', 'done', 'failed', 'expired', 'canceled'] as const);
export type JobState = (typeof JOB_STATES)[number];

export const FINAL_STATES: ReadonlySet<JobState> = Object.freeze(new Set<JobState>(['done', 'failed', 'expired', 'canceled']));

/**
 * How a lease ended: the job done, an error report, its time up, given up (the node gone or
 * disabled; or asking for more than it holds: abandoned), the job's deadline, the job canceled.
 * error and expired are failures of the job, owned by the node (it is kept off the job);
 * released and abandoned are not (a repeat is the node's: it is kept off the job too);
 * deadline and canceled are nobody's. docs/coordinator.md, "Whose fault an attempt's end is".
 */
export const LEASE_OUTCOMES = Object.freeze(['done', 'error', 'expired', 'released', 'abandoned', 'deadline', 'canceled'] as const);
export type LeaseOutcome = (typeof LEASE_OUTCOMES)[number];

// A job's delivery (issue 55; migrations/0033_checked_delivery.sql, docs/verification.md
// "Checked delivery"): orthogonal to its state. A job of a key set to checked, or sent with
// `x-ins-delivery: checked`, is submitted `held` (jobs/sql/submit.ts); its owner reads it as
// still open while done and held. The auditor (src/verify/delivery.ts) decides:
//
//                     a check of the held answer passed
//   held ───────────────────────────────────────────────────▶ checked   its own answer, or
//    │  ▲                                                                delivery_from's
//    │  │ the answer failed its check: a re-run (a copy of the job) is queued and held
//    │  └─ in its place (delivery_from), checked the same way
//    └─────────────────────────────────────────────────────────▶ unchecked  no node could check
//          nothing could be queued to check it; read as unchecked       it: the owner gets an
//          too once the job's deadline passed while held                error, never the answer
//
// NULL: immediate delivery, as before. checked and unchecked are final.
export const DELIVERY_STATES = Object.freeze(['held', 'checked', 'unchecked'] as const);
export type DeliveryState = (typeof DELIVERY_STATES)[number];
