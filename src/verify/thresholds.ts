// Thresholds of the token-level test per group (issue 31; docs/verification.md "Token-level
// checks", migrations/0021_token_thresholds.sql): a model, a scoring method (scores.method:
// prefill, replay) and the judged node's declared quantisation. judgeScores (scores.ts) picks a
// check's thresholds here: its group's, else its model and method's for nodes declaring no
// quantisation (''), else the defaults P0, P1 (token-stats.ts).
//
// Calibration (`ins verify calibrate`, src/cli/verify-commands.ts): over the checks judged within
// the evidence window whose judged node is trusted and was never flagged, and whose checker was
// never flagged and is not suspended — honest nodes checking each other — per group the answers,
// scored positions and confident mismatches, the observed rate and a one-sided 99.9 % upper bound
// on it (Wilson's score bound, z = 3.09: sound for small counts and for a rate of 0), and the
// proposal p0 = max(P0, 1.5 × upper), rounded up to 3 decimals, p1 = max(P1, 3 × p0). A group
// whose p1 would reach 0.5 is too noisy to judge by tokens (its honest nodes mismatch nearly as
// often as an impostor would: nothing is proposed); a group with fewer than --min-answers
// answers is listed without a proposal. Applying is the operator's act: a group made only of
// impostors checking each other would calibrate itself.
//
// Why 3 × p0 and not more: a group needs calibrating when its honest rate is above the default
// test's break-even (about 6.6 %, where the defaults' per-position evidence turns positive);
// with p1 = 5 × p0 every such group would have p1 ≥ 0.5, and an impostor at 40 % would look
// honest under p1 = 0.8. With 3 × p0 the break-even rate (where evidence turns positive) is
// about 1.9 × p0 — e.g. 30 % for p0 = 0.16 — and every group up to p0 = 0.166 can be judged.
import { sql, type Database, type Queryable } from '../db/database.js';
import { nodeSuspended } from '../db/rules/suspended.js';
import { DEFAULT_THRESHOLDS, MIN_POSITIONS, P0, P1, type Thresholds } from './token-stats.js';

/** One-sided 99.9 % normal quantile. */
export const Z = 3.09;
/** The margin over the upper bound of the honest rate that becomes p0. */
export const P0_MARGIN = 1.5;
/** p1 = max(P1, P1_RATIO × p0). */
export const P1_RATIO = 3;
/** A proposed p1 at or above this: the group is too noisy to judge by tokens. */
export const TOO_NOISY = 0.5;
export const DEFAULT_MIN_ANSWERS = 50;

// The thresholds set for the models $1.
const READ = sql('verify_thresholds_read', `SELECT model_id, method, quantization, p0, p1 FROM token_thresholds WHERE model_id = ANY($1::int[])`);

// Per group (model, method, quantisation: '' none declared), the checks judged within the
// window ($1 seconds) of at least $2 scored positions (fewer count for nothing in the test) whose
// judged node is trusted and was never flagged (on any model), and whose checker was never
// flagged and is not suspended.
const CALIBRATION = sql(
  'verify_thresholds_calibration',
  `SELECT t.model_id, m.name AS model, t.method, coalesce(t.quantization, '') AS quantization,
    count(*)::int AS answers, sum(t.positions)::float8 AS positions, sum(t.mismatches)::float8 AS mismatches
  FROM token_checks t JOIN models m ON m.id = t.model_id
  WHERE t.at > now() - make_interval(secs => $1::float8) AND t.positions >= $2::int
    AND NOT EXISTS (SELECT 1 FROM node_standing n WHERE n.node_id = t.node_id AND n.state <> 'trusted')
    AND NOT ${nodeSuspended('t.checker_id')}
    AND NOT EXISTS (SELECT 1 FROM node_token_evidence e WHERE e.node_id IN (t.node_id, t.checker_id) AND e.flags > 0)
  GROUP BY t.model_id, m.name, t.method, coalesce(t.quantization, '')
  ORDER BY m.name, t.method, 4`,
);

// The proposals applied ($1..$8 parallel: model, method, quantisation, p0, p1, answers, positions, mismatches).
const UPSERT = sql(
  'verify_thresholds_upsert',
  `INSERT INTO token_thresholds AS t (model_id, method, quantization, p0, p1, answers, positions, mismatches)
  SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::float8[], $5::float8[], $6::int[], $7::bigint[], $8::bigint[])
  ON CONFLICT (model_id, method, quantization) DO UPDATE SET p0 = EXCLUDED.p0, p1 = EXCLUDED.p1, answers = EXCLUDED.answers,
    positions = EXCLUDED.positions, mismatches = EXCLUDED.mismatches, set_at = now()`,
);

/** A check's group: quantisation null (none declared) falls back like ''. */
export type ThresholdPicker = (modelId: number, method: string, quantization: string | null) => Thresholds;

/** The thresholds of the models' groups (one statement), as a picker: the group's, else (model, method, ''), else the defaults. */
export async function thresholdsOf(db: Queryable, modelIds: readonly number[]): Promise<ThresholdPicker> {
  const rows = modelIds.length
    ? await db.query<{ model_id: number; method: string; quantization: string; p0: number; p1: number }>(READ, [[...new Set(modelIds)]])
    : [];
  if (rows.length === 0) return () => DEFAULT_THRESHOLDS;
  const set = new Map(rows.map((r) => [`${r.model_id}\u0000${r.method}\u0000${r.quantization}`, { p0: r.p0, p1: r.p1 }]));
  return (modelId, method, quantization) =>
    set.get(`${modelId}\u0000${method}\u0000${quantization ?? ''}`) ?? set.get(`${modelId}\u0000${method}\u0000`) ?? DEFAULT_THRESHOLDS;
}

/** Wilson's one-sided upper bound on a rate of k in n (z = Z). */
export function upperBound(k: number, n: number, z = Z): number {
  if (n <= 0) return 1;
  const p = k / n;
  const z2 = z * z;
  return Math.min(1, (p + z2 / (2 * n) + z * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n))) / (1 + z2 / n));
}

/** Rounded up to 3 decimals (a hair of float error is not a step up). */
const ceil3 = (x: number): number => Math.ceil(x * 1000 - 1e-9) / 1000;

export type CalibrationStatus = 'proposed' | 'too few answers' | 'too noisy';

export interface CalibrationGroup {
  model: string;
  method: string;
  /** null: nodes that declared none. */
  quantization: string | null;
  answers: number;
  positions: number;
  mismatches: number;
  rate: number;
  upper: number;
  status: CalibrationStatus;
  proposed: Thresholds | null;
  current: Thresholds;
}

/** The proposal for an observed group (pure). */
export function propose(
  answers: number,
  positions: number,
  mismatches: number,
  minAnswers: number,
): { rate: number; upper: number; status: CalibrationStatus; proposed: Thresholds | null } {
  const rate = positions > 0 ? mismatches / positions : 0;
  const upper = upperBound(mismatches, positions);
  const p0 = ceil3(Math.max(P0, P0_MARGIN * upper));
  const p1 = ceil3(Math.max(P1, P1_RATIO * p0));
  if (answers < minAnswers) return { rate, upper, status: 'too few answers', proposed: null };
  if (p1 >= TOO_NOISY) return { rate, upper, status: 'too noisy', proposed: null };
  return { rate, upper, status: 'proposed', proposed: { p0, p1 } };
}

interface Row {
  model_id: number;
  model: string;
  method: string;
  quantization: string;
  answers: number;
  positions: number;
  mismatches: number;
}

/** The calibration of every group with honest checks within the window; with `apply`, the proposals upserted in one transaction. */
export async function calibrate(
  db: Database,
  o: { windowSeconds: number; minAnswers: number; apply: boolean },
): Promise<{ groups: CalibrationGroup[]; applied: number }> {
  const rows = await db.query<Row>(CALIBRATION, [o.windowSeconds, MIN_POSITIONS]);
  // What judges each group now (the same fallback as judging's).
  const current = await thresholdsOf(
    db,
    rows.map((r) => r.model_id),
  );
  const groups = rows.map((r) => ({
    row: r,
    group: {
      model: r.model,
      method: r.method,
      quantization: r.quantization === '' ? null : r.quantization,
      answers: r.answers,
      positions: r.positions,
      mismatches: r.mismatches,
      ...propose(r.answers, r.positions, r.mismatches, o.minAnswers),
      current: current(r.model_id, r.method, r.quantization),
    } satisfies CalibrationGroup,
  }));
  const applying = o.apply ? groups.filter((g) => g.group.proposed) : [];
  if (applying.length) {
    const col = <T>(f: (g: (typeof groups)[number]) => T) => applying.map(f);
    await db.transaction(async (tx) => {
      await tx.query(UPSERT, [
        col((g) => g.row.model_id),
        col((g) => g.row.method),
        col((g) => g.row.quantization),
        col((g) => g.group.proposed!.p0),
        col((g) => g.group.proposed!.p1),
        col((g) => g.row.answers),
        col((g) => g.row.positions),
        col((g) => g.row.mismatches),
      ]);
    });
  }
  return { groups: groups.map((g) => g.group), applied: applying.length };
}
