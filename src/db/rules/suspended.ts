// The one "node is suspended" rule (src/verify/standing.ts), included as text by every statement
// that asks it: leases and hand-offs (src/jobs/sql/lease.ts, submit.ts), reports
// (src/jobs/sql/complete.ts), sessions and keys (src/repositories/), copies (src/verify/).
//
// Text, not a SQL function: a function body with a subquery is never inlined by PostgreSQL's
// planner (inline_function gives up on sublinks), so `NOT node_suspended(x)` would run as an
// opaque call per row, where the EXISTS written into the statement plans as an anti-join on
// node_standing's primary key. The alias is one no statement uses, so the column passed in is
// never shadowed.

/** SQL: whether the node whose id is the expression `nodeId` is suspended. */
export const nodeSuspended = (nodeId: string): string =>
  `EXISTS (SELECT 1 FROM node_standing suspension WHERE suspension.node_id = ${nodeId} AND suspension.state = 'suspended')`;
