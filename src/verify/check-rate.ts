// How often a node's jobs are checked (docs/verification.md, "Adaptive checking"): BOINC's
// adaptive replication, with a floor. The record is the node's standing and its run of
// agreements in a row (node_standing.clean_streak: one per check it passed, as the answering or
// the checking node; 0 again at any strike, any disagreement and a reinstatement).
//
//   on probation                      1            every job it runs (as before)
//   run < VERIFY_PROBATION_AGREEMENTS VERIFY_SHARE a new node, or one back from a strike
//   run ≥ that (N)                    VERIFY_SHARE × N / run, never below VERIFY_FLOOR
//
// So the rate halves each time the run doubles (BOINC checks a trusted host with probability
// 1/run; scaled by the full rate here, so that there is no cliff at N), and a node that starts
// cheating after a long run is checked at least at the floor, then at the full rate from its
// first strike or disagreement on. A floor above VERIFY_SHARE changes nothing (the full rate is
// the most a trusted node is checked).
import type { Standing } from './standing.js';

export interface CheckRecord {
  standing: Standing;
  /** Agreements in a row since its last strike, disagreement or reinstatement. */
  run: number;
}

export interface CheckRateConfig {
  /** VERIFY_SHARE: the full rate. */
  share: number;
  /** VERIFY_FLOOR: the least rate of a trusted node. */
  floor: number;
  /** VERIFY_PROBATION_AGREEMENTS: the run after which the rate starts to fall. */
  probationAgreements: number;
}

/**
 * The probability that a job the node ran is checked. The one place the rate is decided: the
 * auditor picks jobs by it (auditor.ts), the node's views show it (audit-view.ts).
 */
export function checkRate(r: CheckRecord, c: CheckRateConfig): number {
  if (r.standing === 'probation') return 1;
  if (r.standing === 'suspended') return 0;
  if (r.run < c.probationAgreements) return c.share;
  return Math.min(c.share, Math.max(c.floor, (c.share * c.probationAgreements) / r.run));
}
