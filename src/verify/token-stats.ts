// Judging a node from token-level scores of its answers (issue 31; docs/verification.md
// "Token-level checks"). Pure: no storage, no HTTP. A checking node scored an audited answer
// (src/worker/scoring.ts: per position the audited token's rank and log-probability under the
// checker's model, and the checker's own top-1 and top-2 gap); this module sums one answer up
// and keeps a per-node sequential test.
//
// Per answer:
// - top-1 agreement: the share of positions where the audited token is the checker's choice;
// - outside the top-k: the share the checker ranks beyond k (k = 10);
// - confident mismatches: positions where the audited token is not the checker's choice and is
//   far less likely than it: its log-probability below the top-1's by more than
//   MARGIN × max(temperature, TEMPERATURE_FLOOR) nats (a token outside the top-k always counts).
//   An honest answer sampled at temperature T rarely holds a token that much less likely (at
//   T: probability ≤ e^-MARGIN per position, before top-k/top-p cut it further); at T = 0 the
//   floor still lets near-ties between two machines' rounding pass. A different model, or the
//   same one disturbed (a heavier quantisation), puts such tokens into its answers.
//
// Per node, a one-sided CUSUM on confident mismatches (Page's test; Wald's log-likelihood ratio
// per position, honest rate P0 against impostor rate P1): each answer adds
// k·ln(P1/P0) + (n−k)·ln((1−P1)/(1−P0)), capped to at most H/3 so no single answer (however
// unlucky) brings a node to H, floored at 0. The node is flagged when the sum reaches H. The
// false-alarm rate: an honest node (mismatch rate ≤ P0) reaches H on average no sooner than
// after e^H positions' worth of evidence (Lorden's bound for CUSUM), i.e. H = ln(10⁵): at most
// about one false flag per 100,000 honest scored positions (≥ 3,000 answers of 32 tokens),
// and never within 3 answers. A steady impostor with mismatch rate ≥ P1 on answers of ≥ 32
// scored positions is flagged after 3 answers (each adds at least H/3); test/token-stats.test.ts
// measures both on real tiny models.
//
// P0 and P1 are the defaults: a group of nodes (a model, a scoring method, the judged node's
// declared quantisation) may have its own, calibrated from honest nodes' checks of each other
// (thresholds.ts, migrations/0021_token_thresholds.sql), passed to answerStats. H and the cap stay
// whatever the thresholds: Lorden's bound holds for the test's own p0 and for any honest rate
// that stays under it, so a group calibrated to a p0 above its honest rate keeps the same
// false-alarm bound; what changes is how high an impostor's rate must be to be caught.

/** A scored position (the worker's PositionScore, src/worker/scoring.ts: the fields judged here). */
export interface ScoredPosition {
  /** 1 = the checker's own choice; beyond TOP_K: outside the alternatives the backend listed. */
  rank: number;
  logprob: number;
  top_logprob: number;
}

export const TOP_K = 10;
export const MARGIN = 4;
export const TEMPERATURE_FLOOR = 0.25;
/** Confident-mismatch rate, per position, of an honest node (calibrated: honest nodes checking each other measured ≤ 0.01 on average). */
export const P0 = 0.02;
/** Of a node serving another model or a heavier quantisation of it (measured ≥ 0.1). */
export const P1 = 0.15;
/** The CUSUM's threshold: ln(1e5). */
export const H = Math.log(1e5);
/** No answer moves a node more than this towards H: three answers at least. */
export const ANSWER_CAP = H / 3;
/** Fewer scored positions than this: the answer says too little and counts for nothing. */
export const MIN_POSITIONS = 8;

export interface AnswerStats {
  positions: number;
  top1: number;
  outsideTopK: number;
  confidentMismatches: number;
  /** This answer's evidence (log-likelihood ratio, capped): > 0 points towards another model. */
  evidence: number;
}

/** Is this position a confident mismatch, for a job sampled at `temperature`. */
export function confidentMismatch(p: ScoredPosition, temperature: number): boolean {
  if (p.rank > TOP_K) return true;
  return p.rank > 1 && p.top_logprob - p.logprob > MARGIN * Math.max(temperature, TEMPERATURE_FLOOR);
}

/** The test's rates per scored position: an honest node's confident mismatches (p0) against an impostor's (p1); 0 < p0 < p1 < 1. */
export interface Thresholds {
  p0: number;
  p1: number;
}

export const DEFAULT_THRESHOLDS: Thresholds = Object.freeze({ p0: P0, p1: P1 });

export function answerStats(positions: readonly ScoredPosition[], temperature: number, thresholds: Thresholds = DEFAULT_THRESHOLDS): AnswerStats {
  const n = positions.length;
  if (n === 0) return { positions: 0, top1: 0, outsideTopK: 0, confidentMismatches: 0, evidence: 0 };
  let top1 = 0;
  let outside = 0;
  let k = 0;
  for (const p of positions) {
    if (p.rank === 1) top1++;
    if (p.rank > TOP_K) outside++;
    if (confidentMismatch(p, temperature)) k++;
  }
  const up = Math.log(thresholds.p1 / thresholds.p0);
  const down = Math.log((1 - thresholds.p1) / (1 - thresholds.p0));
  const llr = n < MIN_POSITIONS ? 0 : k * up + (n - k) * down;
  return { positions: n, top1: top1 / n, outsideTopK: outside / n, confidentMismatches: k, evidence: Math.min(llr, ANSWER_CAP) };
}

/**
 * Two scorers of one answer agree with each other when their log-probabilities of its tokens,
 * position by position, correlate at least this much (Pearson). Two nodes running one model
 * score a text alike whatever it is (a text of another model included): their curves rise and
 * fall together, ≥ 0.99 for the tiny models with 1 % and 1.5 % noise on their weights, and for
 * 20 % and 21 %; two different models do not (−0.68 to 0.74, median about 0, over 30 answers
 * of 48 tokens per pair; test/token-stats.test.ts checks each pair on its own 30). Real models
 * are not measured here; a quantisation of the same model is the close case (the noised copies).
 */
export const SCORER_AGREEMENT = 0.9;
/** Log-probabilities at or below this say nothing to correlate (a backend's "outside its alternatives" can be −∞ or a sentinel). */
const LOGPROB_FLOOR = -30;

/**
 * Whether two scorers' positions of one answer (scored the same way: callers compare one method
 * with itself) come from one model: their log-probabilities correlate at least SCORER_AGREEMENT
 * over the positions both scored above LOGPROB_FLOOR. Fewer than MIN_POSITIONS such positions,
 * or one side without variation, is no agreement: a scorer that reports every token at the floor
 * (a flat list, its evidence still positive) must not vouch for another.
 */
export function scorersAgree(a: readonly ScoredPosition[], b: readonly ScoredPosition[]): boolean {
  const x: number[] = [];
  const y: number[] = [];
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i]!.logprob > LOGPROB_FLOOR && b[i]!.logprob > LOGPROB_FLOOR) {
      x.push(a[i]!.logprob);
      y.push(b[i]!.logprob);
    }
  }
  const n = x.length;
  if (n < MIN_POSITIONS) return false;
  const mx = x.reduce((s, v) => s + v, 0) / n;
  const my = y.reduce((s, v) => s + v, 0) / n;
  let cov = 0;
  let vx = 0;
  let vy = 0;
  for (let i = 0; i < n; i++) {
    cov += (x[i]! - mx) * (y[i]! - my);
    vx += (x[i]! - mx) ** 2;
    vy += (y[i]! - my) ** 2;
  }
  if (vx < 1e-12 || vy < 1e-12) return false;
  return cov / Math.sqrt(vx * vy) >= SCORER_AGREEMENT;
}

/** A node's running test: `sum` in [0, H]; flagged once it reached H (and stays so until reset by the caller). */
export interface NodeTest {
  sum: number;
  answers: number;
  flagged: boolean;
}

export const freshTest = (): NodeTest => ({ sum: 0, answers: 0, flagged: false });

/** The node's test after one more scored answer. */
export function observe(t: NodeTest, a: AnswerStats): NodeTest {
  if (t.flagged) return { ...t, answers: t.answers + 1 };
  const sum = Math.max(0, t.sum + a.evidence);
  return { sum, answers: t.answers + 1, flagged: sum >= H - 1e-9 };
}
