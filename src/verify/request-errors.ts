// Request-error claims are audited (issue 29; docs/verification.md, "Request errors"). A node's
// error report of type invalid_request_error says the job's own request was at fault (too long
// a context, an invalid schema): the job fails at once with 400, no retry on another node and no
// failure of the node (jobs/sql/complete.ts) — so a hostile node could fail any job it is given
// by claiming it. Each claim is checked: the job is copied (jobs.verify_of, the original's
// request) to a node that held no lease of it, when such a node that may run it is online
// (copies.ts placeCopies). If that node answers it, the request was not at fault: the claimer
// gets a `false_request_error` strike (the auditor judges the copy once it is done,
// auditor.ts). If the copy too ends as a request error, or no node answers it, nothing
// follows. The user's job stays failed either way: its 400 was answered already.
import { sql, type Database, type Queryable } from '../db/database.js';
import type { Outcome } from '../jobs/outcome.js';
import { queueCopies, type CheckQueue } from './copies.js';

/** What a copy made to audit a claim carries in jobs.suspicion: the node that claimed the request error. */
const CLAIMER = 'request_error_of';

export interface RequestErrorOptions {
  onlineWindow: number;
  modelsTtl: number;
  jobTimeout: number;
  checks: CheckQueue;
}

// The jobs $1 that failed with a request error and have no copy yet (one audit per claim, and
// none of a copy), with every node that held a lease of each: the copy goes to none of them.
const CLAIMED = sql(
  'verify_request_error_claims',
  `SELECT j.id::text AS id, j.model_id, ARRAY(SELECT DISTINCT h.node_id::int FROM job_leases h WHERE h.job_id = j.id) AS holders
  FROM jobs j WHERE j.id = ANY($1::uuid[]) AND j.state = 'failed' AND j.error IS NOT NULL AND j.verify_of IS NULL
    AND NOT EXISTS (SELECT 1 FROM jobs c WHERE c.verify_of = j.id)`,
);

/** Copies the claimed jobs to another node each, where one is online; answers the outcome to apply once committed, and how many copies were made. */
export async function auditRequestErrors(
  db: Database,
  claims: readonly { nodeId: number; jobId: string }[],
  o: RequestErrorOptions,
): Promise<{ outcome: Outcome | undefined; copies: number }> {
  if (claims.length === 0) return { outcome: undefined, copies: 0 };
  return db.transaction((tx) => queueClaimAudits(tx, claims, o));
}

/**
 * The same inside the caller's transaction: the completion that took the claims (issue 53,
 * jobs/lifecycle.ts ClaimAudit), so that a claim and its copy commit together.
 */
export async function queueClaimAudits(
  tx: Queryable,
  claims: readonly { nodeId: number; jobId: string }[],
  o: RequestErrorOptions,
): Promise<{ outcome: Outcome | undefined; copies: number }> {
  const claimer = new Map(claims.map((c) => [c.jobId, c.nodeId]));
  const jobs = await tx.query<{ id: string; model_id: number; holders: number[] }>(CLAIMED, [[...claimer.keys()]]);
  const plans = jobs.map((j) => {
    const nodeId = claimer.get(j.id)!;
    return { of: j.id, modelId: j.model_id, exclude: [nodeId, ...new Set(j.holders.filter((n) => n !== nodeId))], suspicion: { [CLAIMER]: nodeId } };
  });
  const { outcome, made } = await queueCopies(tx, plans, { ...o, deadline: o.jobTimeout });
  return { outcome, copies: made.length };
}

/** A done copy, as the auditor reads it. */
export interface DoneCopy {
  id: string;
  verify_of: string | null;
  node_id: number;
  suspicion: Record<string, unknown> | null;
}

/** Is this copy the audit of a request-error claim? */
export const auditsClaim = (c: DoneCopy): boolean => typeof c.suspicion?.[CLAIMER] === 'number';

/** The strikes the done audits of claims give: another node answered the request the claimer said was at fault. */
export function falseClaims(copies: readonly DoneCopy[]): { nodeId: number; jobId: string; evidence: Record<string, unknown> }[] {
  return copies.filter(auditsClaim).map((c) => ({
    nodeId: c.suspicion![CLAIMER] as number,
    jobId: c.verify_of!,
    evidence: { job: c.verify_of, claimed: 'invalid_request_error', answered_by_job: c.id, answered_by_node: c.node_id },
  }));
}
