// A job's lifecycle, one frozen set of states (mirrored by the CHECK of jobs.state in
// migrations/0005_coordinator.sql) and the transitions the coordinator makes:
//
//                submit              lease (get_job)             success report
//   (none) ─────────────▶ queued ───────────────────▶ leased ─────────────────────▶ done
//                          │  ▲                          │
//                          │  └──────────────────────────┤ lease expired, node deregistered,
//                          │      attempts < MAX_ATTEMPTS│ error report, lease abandoned
//                          │                             │
//                          │                             ├──▶ failed   (the same, attempts = MAX_ATTEMPTS)
//                          │                             │
//                          ├─────────────────────────────┴──▶ expired  (past the job's deadline)
//                          │
//                          └──▶ canceled  (by its owner or an operator, while queued)
//
// done, failed, expired and canceled are final. A job is leased to one node at a time; each
// lease is one attempt (job_leases), ended with one of LEASE_OUTCOMES. A job is done exactly
// once, by exactly one node, and that node is credited exactly once (results/credit.ts).

export const JOB_STATES = Object.freeze(['queued', 'leased', 'done', 'failed', 'expired', 'canceled'] as const);
export type JobState = (typeof JOB_STATES)[number];

export const FINAL_STATES: ReadonlySet<JobState> = Object.freeze(new Set<JobState>(['done', 'failed', 'expired', 'canceled']));

/** How a lease ended: the job done, an error report, its time up, the node gone or asking anew, the job's deadline. */
export const LEASE_OUTCOMES = Object.freeze(['done', 'error', 'expired', 'released', 'abandoned', 'deadline'] as const);
export type LeaseOutcome = (typeof LEASE_OUTCOMES)[number];
