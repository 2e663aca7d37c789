// Score checks (issue 31; docs/verification.md "Token-level checks"): instead of asking another
// node for its own answer and comparing texts (copies.ts, rules.ts), a node that declared
// `score` for the model re-scores the audited answer token by token (src/worker/score-job.ts)
// and the coordinator judges from the statistics (token-stats.ts), keeping a sequential test
// (CUSUM) per node and model in node_token_evidence (migrations/0017_token_checks.sql).
// - Which jobs: those the audit picks (auditor.ts) that are plain chat jobs (no capability
//   needed, not continued from another node's beginning, a non-empty answer, no replay
//   suspicion: those keep today's copy), at any temperature (a copy can only judge
//   temperature 0). A job with no scorer online that is not temperature 0 is not checked; one
//   at temperature 0 gets a copy as before, counted as checked the weaker way (`copied`).
// - The check's request is the audited job's whole (messages, sampling fields, seed) plus
//   `params.score.answer`, and `needs` the `score` bit: the seed's worker never leases one.
// - Judging: each answer's evidence moves the node's test; reaching H gives the node an
//   `impostor` strike, which suspends it at once (the test's false-alarm rate is stated in
//   token-stats.ts), and the jobs whose answers added evidence since its test last started are
//   reversed with it. An answer with little evidence against it is an agreement; one at
//   temperature 0 that a second scorer's spot check also finds in line is kept as a reference
//   for canaries (canaries.ts), whose answers move the test of the lone node that gave them
//   (judgeCanaryAnswers). No verdict rests on one party's word (judgeScores).
// - Thresholds: each check is judged with its group's (the model, the scores' method, the judged
//   node's declared quantisation; thresholds.ts), the defaults where none were calibrated.
import { randomUUID } from 'node:crypto';
import { doneQuantization } from '../db/rules/declared-build.js';
import { servingSession } from '../db/rules/live.js';
import { sql, type Queryable } from '../db/database.js';
import type { Outcome } from '../jobs/outcome.js';
import { CAPABILITIES } from '../jobs/capabilities.js';
import type { JobRequest } from '../jobs/request.js';
import type { Scores } from '../jobs/answer.js';
import { placeCopies, type CheckQueue, type CopyPlan } from './copies.js';
import type { Check } from '../jobs/sql/queue-checks.js';
import { answerStats, freshTest, H, MIN_POSITIONS, observe, scorersAgree, type ScoredPosition } from './token-stats.js';
import { thresholdsOf } from './thresholds.js';
import { canaryVerdict, referenceGaps, remember, type Reference } from './canaries.js';
import { scoreRequest } from './score-request.js';
import type { WireToken } from '../validation/answer-tokens.js';

// Online nodes in good standing that declared `score` for each of the models $1 ($2 the online
// window, $3 MODELS_TTL, in seconds; $4 the score bit). model_caps is aligned with models (and
// empty for a session that declared no capabilities: unnest pads it with NULL).
export const SCORERS = sql(
  'verify_scorers',
  `SELECT d.model_id, array_agg(DISTINCT s.node_id)::int[] AS nodes
  FROM node_sessions s JOIN nodes n ON n.id = s.node_id CROSS JOIN LATERAL unnest(s.models, s.model_caps) AS d(model_id, caps)
  WHERE d.model_id = ANY($1::int[]) AND coalesce(d.caps, 0) & $4::int <> 0 AND ${servingSession('s', 'n', '$2', '$3')}
  GROUP BY d.model_id`,
);

// The audited jobs $1 as a score check needs them: the whole request, the whole answer, its
// tokens as the node reported them (issue 53; NULL: none), and whether the node that finished it
// continued another's beginning (then a copy judges it).
const AUDITED = sql(
  'verify_scorable',
  `SELECT j.id::text, j.node_id::int, j.model_id, j.request,
    coalesce(j.result -> 'message' ->> 'content', '') AS content, j.tokens,
    EXISTS (SELECT 1 FROM job_leases l WHERE l.job_id = j.id AND l.outcome = 'done' AND l.prefix <> '') AS continued
  FROM jobs j WHERE j.id = ANY($1::uuid[])`,
);

// Counts the node's audited jobs checked each way ($1 nodes, $2 models, $3 scored, $4 copied; one row per pair).
const COUNT_CHECKS = sql(
  'verify_count_checks',
  `INSERT INTO node_token_evidence AS e (node_id, model_id, scored, copied)
  SELECT * FROM unnest($1::bigint[], $2::int[], $3::int[], $4::int[]) ORDER BY 1, 2
  ON CONFLICT (node_id, model_id) DO UPDATE SET scored = e.scored + EXCLUDED.scored, copied = e.copied + EXCLUDED.copied, updated_at = now()`,
);

// The score checks $1 done, with the audited job's node, model and request (a reference for
// canaries), the checker's scores, and what a confirming check needs (its request, the nodes it
// must not go to, what it confirms). A canary's job may be gone by now (retention): its own
// request has the same sampling fields, and the node it judges is the one that scored it.
// The quantisation each node involved declared for the model (session_model_builds) in the
// session that did its part (the done lease): the audited job's node, the checker, and for a
// confirming check the first scorer (its check is `suspicion.confirms`; its scores are read with
// the batch's other checks' scores, OTHER_SCORES: do the two scorers run one model?).
const CHECKS = sql(
  'verify_score_checks',
  `SELECT c.id::text AS check_id, c.verify_of::text AS job_id, o.node_id::int AS node_id, c.model_id, c.node_id::int AS checker_id,
    (coalesce(o.request, c.request) ->> 'temperature')::float8 AS temperature, c.result -> 'scores' AS scores, c.request, o.request AS original,
    c.exclude_nodes::int[] AS exclude, c.suspicion,
    ${doneQuantization('c.verify_of', 'c.model_id')} AS quantization, ${doneQuantization('c.id', 'c.model_id')} AS checker_quantization,
    ${doneQuantization("(c.suspicion ->> 'confirms')::uuid", 'c.model_id')} AS scorer_quantization
  FROM jobs c LEFT JOIN jobs o ON o.id = c.verify_of
  WHERE c.id = ANY($1::uuid[]) ORDER BY c.id`,
);

// The tests of the pairs ($1 nodes, $2 models), made if new, locked in order: one server moves a node's test at a time.
const ENSURE = sql(
  'verify_token_evidence_ensure',
  `INSERT INTO node_token_evidence (node_id, model_id)
  SELECT * FROM unnest($1::bigint[], $2::int[]) ORDER BY 1, 2 ON CONFLICT DO NOTHING`,
);
const LOCK = sql(
  'verify_token_evidence_lock',
  `SELECT node_id::int, model_id, cusum, answers, flagged_at FROM node_token_evidence
  WHERE (node_id, model_id) IN (SELECT * FROM unnest($1::bigint[], $2::int[])) ORDER BY node_id, model_id FOR UPDATE`,
);
// The tests after the batch's answers ($1..$7 parallel: node, model, cusum, answers, positions, mismatches, flags added).
const SAVE = sql(
  'verify_token_evidence_save',
  `UPDATE node_token_evidence e SET cusum = u.cusum, answers = u.answers,
    positions = e.positions + u.positions, mismatches = e.mismatches + u.mismatches, flags = e.flags + u.flags,
    flagged_at = CASE WHEN u.flags > 0 THEN now() ELSE e.flagged_at END, updated_at = now()
  FROM unnest($1::bigint[], $2::int[], $3::float8[], $4::int[], $5::bigint[], $6::bigint[], $7::int[]) AS u(node_id, model_id, cusum, answers, positions, mismatches, flags)
  WHERE e.node_id = u.node_id AND e.model_id = u.model_id`,
);
// Each judged check's summary.
const RECORD = sql(
  'verify_token_checks_record',
  `INSERT INTO token_checks (check_id, job_id, node_id, model_id, checker_id, method, positions, top1, mismatches, evidence, cusum, quantization)
  SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::int[], $5::bigint[], $6::text[], $7::int[], $8::float8[], $9::int[], $10::float8[], $11::float8[], $12::text[])
  ON CONFLICT (check_id) DO NOTHING`,
);
// The node's jobs whose answers moved its test towards H since it last started from 0 ($1 node, $2 model, $3 since).
const COVERED = sql(
  'verify_token_covered',
  `SELECT DISTINCT t.job_id::text FROM token_checks t JOIN jobs j ON j.id = t.job_id AND j.node_id = t.node_id
  WHERE t.node_id = $1::bigint AND t.model_id = $2::int AND t.evidence > 0 AND t.at > coalesce($3::timestamptz, '-infinity')`,
);

export interface ScoreOptions {
  onlineWindow: number;
  modelsTtl: number;
  deadline: number;
  checks: CheckQueue;
  /** VERIFY_SPOT_SHARE: the share of answers a scorer found in line that a second scorer scores again. */
  spotShare: number;
}

export interface ScorePlans {
  /** The plans queued as score checks. */
  scored: CopyPlan[];
  /** The plans left to copies (no scorer online, or not a plain chat answer). */
  rest: CopyPlan[];
  outcome: Outcome | undefined;
}

const isPlain = (r: JobRequest): boolean => !r.needs && r.params?.prompt === undefined && r.params?.input === undefined;

/**
 * Queues score checks for the plans of `picked` jobs a scorer can take. `sampledOnly`: plans
 * picked only because a scorer might check them (temperature > 0): dropped when none can.
 */
export async function queueScores(
  db: Queryable,
  plans: CopyPlan[],
  picked: ReadonlySet<string>,
  sampledOnly: ReadonlySet<string>,
  o: ScoreOptions,
): Promise<ScorePlans> {
  const candidates = plans.filter((p) => p.suspicion === null && picked.has(p.of));
  if (candidates.length === 0) return { scored: [], rest: plans.filter((p) => !sampledOnly.has(p.of)), outcome: undefined };
  const rows = await db.query<{
    id: string;
    node_id: number;
    model_id: number;
    request: JobRequest;
    content: string;
    tokens: WireToken[] | null;
    continued: boolean;
  }>(AUDITED, [candidates.map((p) => p.of)]);
  const audited = new Map(rows.map((r) => [r.id, r]));
  const scorable = candidates.filter((p) => {
    const a = audited.get(p.of);
    return a && !a.continued && a.content !== '' && isPlain(a.request);
  });
  // A scorer online outside the plan's exclusions, of the audited node's quantisation when one
  // is online (issue 31: a node is checked by a node that declares the same; copies.ts).
  const placed = new Map((await placeCopies(db, scorable, o.onlineWindow, o.modelsTtl, CAPABILITIES.score)).map((p) => [p.of, p]));
  const scored: CopyPlan[] = [];
  const checks = [];
  for (const p of scorable) {
    const place = placed.get(p.of);
    if (!place) continue;
    const a = audited.get(p.of)!;
    scored.push(p);
    checks.push({
      kind: 'verify' as const,
      id: randomUUID(),
      of: p.of,
      exclude: place.exclude,
      suspicion: null,
      request: scoreRequest(a.request, a.content, a.tokens ?? undefined),
    });
  }
  const rest = plans.filter((p) => !scored.includes(p) && !sampledOnly.has(p.of));
  const outcome = checks.length ? await o.checks.queueChecks(db, checks, o.deadline) : undefined;
  return { scored, rest, outcome };
}

/** Counts, per audited node and model, the jobs checked token by token and those checked by a copy (plans' exclude[0] is the audited node). */
export async function countChecks(db: Queryable, scored: readonly CopyPlan[], copied: readonly CopyPlan[]): Promise<void> {
  const counts = new Map<string, [number, number, number, number]>();
  const add = (p: CopyPlan, i: 2 | 3) => {
    const key = `${p.exclude[0]}:${p.modelId}`;
    const c = counts.get(key) ?? [p.exclude[0]!, p.modelId, 0, 0];
    c[i]++;
    counts.set(key, c);
  };
  for (const p of scored) add(p, 2);
  for (const p of copied) add(p, 3);
  if (counts.size === 0) return;
  const rows = [...counts.values()];
  await db.query(COUNT_CHECKS, [rows.map((r) => r[0]), rows.map((r) => r[1]), rows.map((r) => r[2]), rows.map((r) => r[3])]);
}

/** Is this done check a score check (its request carries the answer it scored)? */
export const isScoreCheck = (request: unknown): boolean =>
  typeof request === 'object' && request !== null && typeof (request as JobRequest).params?.score?.answer === 'string';

const positionsOf = (s: Scores | null): ScoredPosition[] =>
  s ? s.rank.map((rank, i) => ({ rank, logprob: s.logprob[i]!, top_logprob: s.top_logprob[i]! })) : [];

export interface ScoreVerdicts {
  judged: number;
  /** Audited nodes whose answer a scorer found in line with its model: one agreement each. */
  agreed: number[];
  /** Audited nodes whose answer a first scorer, or a canary, found foreign: their run of agreements ends (check-rate.ts), whatever the confirmation says. */
  doubted: number[];
  /** Nodes whose test reached H: an `impostor` strike each, on the job that brought it there, covering the jobs listed. */
  flagged: { nodeId: number; jobId: string; evidence: Record<string, unknown>; covers: string[] }[];
  /** Scorers two others contradicted (their check's job): a `false_score` strike each. */
  falseScores: { nodeId: number; jobId: string; evidence: Record<string, unknown> }[];
  /** Second and third score checks queued, and text copies asked to corroborate a score (their outcome to apply once the transaction commits). */
  confirmations: number;
  /** Two scorers that found the answer foreign (or in line) each in its own way: no verdict. */
  disagreed: number;
  /** A verdict one party's word would have made, with nobody online to confirm it: no verdict. */
  unconfirmed: number;
  /**
   * Each answer's first score check, and a second scorer's of an answer the first found foreign:
   * whether it found the answer in line, and whether another scorer was asked to confirm a
   * foreign verdict (checked delivery acts on them: auditor.ts, delivery.ts). `passes`: in line
   * by checked delivery's stricter rule (passesHeld).
   */
  firsts: { jobId: string; inLine: boolean; passes: boolean; confirming: boolean }[];
  outcome: Outcome | undefined;
}

/**
 * What a score check was queued for (jobs.suspicion; none for the first check of an answer):
 * - `canary`: a stored reference sent to the lone node of its model (canaries.ts);
 * - `confirms`: a second scorer's check of an answer the first (`checker`, its check `confirms`,
 *   its evidence) found foreign;
 * - `spot`: a second scorer's check of an answer the first (`checker`, its check `spot`) found in
 *   line (a share VERIFY_SPOT_SHARE of them);
 * - `decides`: a third scorer's, when the first two disagreed: which side it takes wins.
 */
interface Suspicion {
  canary?: string;
  confirms?: string;
  spot?: string;
  evidence?: number;
  checker?: number;
  decides?: { foreign: string; foreign_checker: number; foreign_evidence: number; in_line: string; in_line_checker: number };
}

interface DoneCheck {
  /** node_id: the audited job's node (null when that job is gone: only a canary's may be). */
  check_id: string;
  job_id: string;
  node_id: number | null;
  model_id: number;
  checker_id: number;
  temperature: number | null;
  scores: Scores | null;
  request: JobRequest;
  original: JobRequest | null;
  exclude: number[];
  suspicion: Suspicion | null;
  /** What the audited job's node, the checker, and (a confirming check) the first scorer declared for the model. */
  quantization: string | null;
  checker_quantization: string | null;
  scorer_quantization: string | null;
}

// The scores other checks of the same answers reported ($1 their jobs): what a second or third
// scorer's are compared with (scorersAgree).
const OTHER_SCORES = sql('verify_other_scores', `SELECT id::text, result -> 'scores' AS scores FROM jobs WHERE id = ANY($1::uuid[])`);

/** Evidence to add to one node's test, from one check, about one job of that node's (its answer, a scorer's check job, or a canary it scored). */
interface Move {
  nodeId: number;
  jobId: string;
  modelId: number;
  check: DoneCheck;
  evidence: number;
  stats: ReturnType<typeof answerStats>;
  quantization: string | null;
  canary?: boolean;
}

/**
 * Did the scorer force the tokens the node generated (`params.score.tokens`, reported with the
 * answer), or re-tokenize the answer's text? A re-tokenized text is often not the split the
 * model generated (every real vocabulary has many splits of one text), and an honest answer
 * then looks foreign to every honest scorer alike: such evidence never convicts by itself.
 */
export const scoredOnTokens = (request: JobRequest): boolean => Array.isArray(request.params?.score?.tokens);

/** Verdicts before any is found. */
/**
 * Whether one score check lets a held answer be given (checked delivery; docs/verification.md).
 * "In line" for the node's sequential test means only "no evidence against": an answer under
 * MIN_POSITIONS scored positions adds none whatever its tokens, and one whose mismatches stay
 * under the test's break-even adds none either. To give an answer on one check's word, it must
 * have been scored at MIN_POSITIONS or more with evidence against it at or below 0, or, shorter,
 * hold no confident mismatch at all; else the answer is treated as failed and run again (no
 * strike: that stays the sequential test's).
 */
export const passesHeld = (stats: { positions: number; confidentMismatches: number; evidence: number }): boolean =>
  stats.positions > 0 && stats.evidence <= 0 && (stats.positions >= MIN_POSITIONS || stats.confidentMismatches === 0);

const noVerdicts = (): ScoreVerdicts => ({
  judged: 0,
  agreed: [],
  doubted: [],
  flagged: [],
  firsts: [],
  falseScores: [],
  confirmations: 0,
  disagreed: 0,
  unconfirmed: 0,
  outcome: undefined,
});

/**
 * Judges the score checks done (their ids). No node is convicted on one party's word
 * (docs/verification.md "Token-level checks"):
 * - an answer the first scorer finds foreign is scored again by a second scorer; both finding it
 *   foreign, and agreeing with each other (token-stats.ts scorersAgree: their scores rise and fall
 *   together, as two nodes of one model's do), move the audited node's test by the smaller
 *   evidence. Two that find it foreign each in its own way run two different models, at least one
 *   not the one declared: no test moves (`disagreed`);
 * - an answer the first finds in line is scored again by a second scorer for a share
 *   (VERIFY_SPOT_SHARE) of them: a scorer that clears answers with made-up scores is checked too;
 * - two scorers that disagree (one foreign, one in line) are decided by a third (none of the
 *   nodes so far): the side it takes wins, and the scorer it contradicts gets a `false_score`
 *   strike; a foreign majority moves the audited node's test;
 * - a scorer that re-tokenized the text (no `params.score.tokens`) moves no test: a foreign
 *   verdict at temperature 0 asks a text copy by a third node instead (copies.ts; the copy path
 *   convicts by a majority of texts);
 * - with no second (or third) scorer online, and no third node for a copy, nobody is convicted
 *   (`unconfirmed`): with two nodes on a model, a scorer's word against the other's answer
 *   convicts nobody, as two disagreeing copies do.
 * A canary (canaries.ts) is the exception: its reference was found in line by two scorers
 * besides its answering node, so the lone node that scores it is judged on its scores.
 */
export async function judgeScores(db: Queryable, checkIds: readonly string[], o: ScoreOptions): Promise<ScoreVerdicts> {
  const out = noVerdicts();
  if (checkIds.length === 0) return out;
  const all = await db.query<DoneCheck>(CHECKS, [checkIds]);
  // Each check is judged with the thresholds of its group: its model, its scores' method, and
  // the judged node's quantisation (the audited node's; a canary's scorer's).
  const thresholds = await thresholdsOf(
    db,
    all.map((c) => c.model_id),
  );
  const statsOf = (c: DoneCheck, quantization: string | null) =>
    answerStats(positionsOf(c.scores), c.temperature ?? 1, thresholds(c.model_id, c.scores?.method ?? 'none', quantization));
  const moves: Move[] = [];
  // A canary: the node that scored a stored reference is the one judged (the reference's
  // answering node and two scorers agreed on it already, its text as they tokenized it).
  for (const c of all.filter((x) => x.suspicion?.canary !== undefined)) {
    out.judged++;
    const stats = statsOf(c, c.checker_quantization);
    if (stats.positions > 0 && stats.evidence <= 0) out.agreed.push(c.checker_id);
    moves.push({
      nodeId: c.checker_id,
      jobId: c.check_id,
      modelId: c.model_id,
      check: c,
      evidence: stats.evidence,
      stats,
      quantization: c.checker_quantization,
      canary: true,
    });
  }
  const checks = all.filter((c) => c.suspicion?.canary === undefined && c.node_id !== null);
  const otherIds = checks.flatMap((c) => {
    const s = c.suspicion;
    return [s?.confirms, s?.spot, s?.decides?.foreign, s?.decides?.in_line].filter((x): x is string => typeof x === 'string');
  });
  const others = new Map(
    otherIds.length ? (await db.query<{ id: string; scores: Scores | null }>(OTHER_SCORES, [otherIds])).map((r) => [r.id, r.scores]) : [],
  );
  /** Two scorers' scores of one answer from different models (compared only when scored the same way: a replay scorer's positions are not a prefill's). */
  const apart = (a: Scores | null | undefined, b: Scores | null | undefined) =>
    !!a && !!b && a.method === b.method && !scorersAgree(positionsOf(a), positionsOf(b));
  // Which scorers are online matters only to a check that may ask another: not to a first check
  // found in line (but the spot-checked share), the common case.
  const spot = new Set(checks.filter((c) => c.suspicion === null && Math.random() < o.spotShare).map((c) => c.check_id));
  const mayAsk = checks.some((c) => c.suspicion !== null || spot.has(c.check_id) || statsOf(c, c.quantization).evidence > 0);
  const scorers = mayAsk ? await scorersOf(db, [...new Set(checks.map((c) => c.model_id))], o) : new Map<number, number[]>();
  const online = (c: DoneCheck, exclude: readonly number[]) => (scorers.get(c.model_id) ?? []).some((n) => !exclude.includes(n));
  const queued: Check[] = [];
  const copies: CopyPlan[] = [];
  const references: Reference[] = [];
  /** Another scorer's check of c's answer, outside `exclude`; false when none is online. */
  const ask = (c: DoneCheck, exclude: number[], suspicion: Suspicion): boolean => {
    if (!online(c, exclude)) return false;
    queued.push({ kind: 'verify', id: randomUUID(), of: c.job_id, exclude, request: c.request, suspicion: suspicion as Record<string, unknown> });
    return true;
  };
  /**
   * A text copy of c's answer (temperature 0 only: else no verdict), run by any node but its
   * own, its holders and the scorers that sided with it (`allowed`: the scorers that found it
   * foreign, which may run it: the copy path convicts only by a majority of texts, rules.ts).
   */
  const copy = (c: DoneCheck, allowed: readonly number[], siding: readonly number[] = []) => {
    if (c.temperature !== 0) out.unconfirmed++;
    else
      copies.push({
        of: c.job_id,
        modelId: c.model_id,
        exclude: [...new Set([...c.exclude.filter((n) => !allowed.includes(n)), ...siding])],
        suspicion: null,
      });
  };
  /** A majority of scorers found c's answer foreign: its node's test moves when they forced its tokens; else a text copy decides. */
  const foreign = (
    c: DoneCheck,
    evidence: number,
    stats: ReturnType<typeof answerStats>,
    allowed: readonly number[],
    siding: readonly number[] = [],
  ) => {
    if (scoredOnTokens(c.request))
      moves.push({ nodeId: c.node_id!, jobId: c.job_id, modelId: c.model_id, check: c, evidence, stats, quantization: c.quantization });
    else copy(c, allowed, siding);
  };
  for (const c of checks) {
    out.judged++;
    const s = c.suspicion;
    const stats = statsOf(c, c.quantization);
    const exclude = [...new Set([...c.exclude, c.checker_id])];
    const inLine = stats.positions > 0 && stats.evidence <= 0;
    if (!s?.confirms && !s?.spot && !s?.decides) {
      // The first check of an answer.
      const confirming = stats.evidence > 0 && ask(c, exclude, { confirms: c.check_id, evidence: stats.evidence, checker: c.checker_id });
      out.firsts.push({ jobId: c.job_id, inLine, passes: passesHeld(stats), confirming });
      if (stats.evidence > 0) {
        out.doubted.push(c.node_id!);
        // No second scorer: a text copy may still decide at temperature 0 (a third node's answer against the node's).
        if (!confirming) copy(c, [c.checker_id]);
      } else {
        if (inLine) out.agreed.push(c.node_id!);
        if (inLine && spot.has(c.check_id)) ask(c, exclude, { spot: c.check_id, checker: c.checker_id, evidence: stats.evidence });
        moves.push({
          nodeId: c.node_id!,
          jobId: c.job_id,
          modelId: c.model_id,
          check: c,
          evidence: stats.evidence,
          stats,
          quantization: c.quantization,
        });
      }
    } else if (s.confirms !== undefined && s.checker !== undefined) {
      // A second scorer of an answer the first found foreign.
      const first = s.evidence ?? 0;
      // Two scorers apart on a held answer: it is given only if a third sides with "in line"
      // (the decides branch below); with no third online it is run again.
      let deciding = false;
      if (stats.evidence > 0) {
        if (apart(others.get(s.confirms), c.scores)) out.disagreed++;
        else foreign(c, Math.min(first, stats.evidence), stats, [s.checker, c.checker_id]);
      } else if (inLine) {
        deciding = ask(c, exclude, {
          decides: { foreign: s.confirms, foreign_checker: s.checker, foreign_evidence: first, in_line: c.check_id, in_line_checker: c.checker_id },
        });
        if (!deciding) out.unconfirmed++;
      }
      out.firsts.push({ jobId: c.job_id, inLine, passes: false, confirming: deciding });
    } else if (s.spot !== undefined && s.checker !== undefined) {
      // A second scorer of an answer the first found in line.
      if (stats.evidence > 0) {
        if (
          !ask(c, exclude, {
            decides: {
              foreign: c.check_id,
              foreign_checker: c.checker_id,
              foreign_evidence: stats.evidence,
              in_line: s.spot,
              in_line_checker: s.checker,
            },
          })
        )
          out.unconfirmed++;
      } else if (
        inLine &&
        stats.positions >= MIN_POSITIONS &&
        c.temperature === 0 &&
        c.original &&
        typeof c.request.params?.score?.answer === 'string' &&
        !apart(others.get(s.spot), c.scores)
      ) {
        // Its node and two scorers agree on it: a reference for canaries (only answers at
        // temperature 0: the one answer a model gives its request).
        const answer = c.request.params.score.answer;
        const first = others.get(s.spot);
        references.push({
          jobId: c.job_id,
          modelId: c.model_id,
          request: c.original,
          answer,
          vouched: [c.node_id!, s.checker, c.checker_id],
          seen: exclude,
          gaps: first && c.scores ? referenceGaps(answer, c.request.params.score.tokens, first, c.scores) : null,
        });
      }
    } else if (s.decides) {
      // A third scorer: the side it takes wins, the scorer it contradicts is struck.
      const d = s.decides;
      // A held answer the first two scorers were apart on: given when this third finds it in line
      // (by checked delivery's rule) and scores as the "in line" scorer did; else run again.
      out.firsts.push({
        jobId: c.job_id,
        inLine,
        passes: inLine && passesHeld(stats) && !apart(others.get(d.in_line), c.scores),
        confirming: false,
      });
      if (stats.evidence > 0) {
        if (apart(others.get(d.foreign), c.scores)) out.disagreed++;
        else {
          out.falseScores.push({
            nodeId: d.in_line_checker,
            jobId: d.in_line,
            evidence: { job: c.job_id, found: 'in_line', contradicted_by_jobs: [d.foreign, c.check_id], model_id: c.model_id },
          });
          foreign(c, Math.min(d.foreign_evidence, stats.evidence), stats, [d.foreign_checker, c.checker_id], [d.in_line_checker]);
        }
      } else if (inLine) {
        if (apart(others.get(d.in_line), c.scores)) out.disagreed++;
        else
          out.falseScores.push({
            nodeId: d.foreign_checker,
            jobId: d.foreign,
            evidence: { job: c.job_id, found: 'foreign', contradicted_by_jobs: [d.in_line, c.check_id], model_id: c.model_id },
          });
      }
    }
  }
  const made = copies.length
    ? (await placeCopies(db, copies, o.onlineWindow, o.modelsTtl)).map((p) => ({
        kind: 'verify' as const,
        id: randomUUID(),
        of: p.of,
        exclude: p.exclude,
        suspicion: null,
      }))
    : [];
  out.unconfirmed += copies.length - made.length;
  if (queued.length + made.length) {
    out.outcome = await o.checks.queueChecks(db, [...queued, ...made], o.deadline);
    out.confirmations = queued.length + made.length;
  }
  await remember(db, references);
  await move(db, moves, out);
  return out;
}

// The canary answers done ($1): the lone node's answer, what it answered, the reference it is
// judged against (in the check's suspicion), and the quantisation it declared for the model.
const CANARY_ANSWERS = sql(
  'verify_canary_answers',
  `SELECT j.id::text AS check_id, j.verify_of::text AS job_id, j.node_id::int AS node_id, j.model_id,
    coalesce(j.result -> 'message' ->> 'content', '') AS content, j.suspicion ->> 'answer' AS reference, j.suspicion -> 'gaps' AS gaps,
    ${doneQuantization('j.id', 'j.model_id')} AS quantization
  FROM jobs j WHERE j.id = ANY($1::uuid[]) ORDER BY j.id`,
);

/** Is this done job a canary sent as an ordinary job (canaries.ts): its answer is judged against the reference's, not by copies. */
export const isCanaryAnswer = (suspicion: Record<string, unknown> | null, request: unknown): boolean =>
  typeof suspicion?.canary === 'string' && !isScoreCheck(request);

/**
 * Judges the canary answers done (their ids; canaries.ts canaryVerdict): each moves the lone
 * node's test by its evidence (an answer that parts from the reference where the reference's
 * scorers were sure: an answer's worth), a full match is an agreement. The canary is the node's
 * own job: a flag covers it like any answer of its.
 */
export async function judgeCanaryAnswers(db: Queryable, ids: readonly string[]): Promise<ScoreVerdicts> {
  const out = noVerdicts();
  if (ids.length === 0) return out;
  const rows = await db.query<{
    check_id: string;
    job_id: string;
    node_id: number;
    model_id: number;
    content: string;
    reference: string | null;
    gaps: number[] | null;
    quantization: string | null;
  }>(CANARY_ANSWERS, [ids]);
  const moves: Move[] = [];
  for (const r of rows) {
    if (r.reference === null) continue;
    out.judged++;
    const v = canaryVerdict(r.content, r.reference, Array.isArray(r.gaps) ? r.gaps : null);
    if (v.agree) out.agreed.push(r.node_id);
    if (v.evidence > 0) out.doubted.push(r.node_id);
    const check: DoneCheck = {
      check_id: r.check_id,
      job_id: r.job_id,
      node_id: r.node_id,
      model_id: r.model_id,
      checker_id: r.node_id,
      temperature: 0,
      scores: null,
      request: { messages: [] } as unknown as JobRequest,
      original: null,
      exclude: [],
      suspicion: { canary: r.job_id },
      quantization: r.quantization,
      checker_quantization: r.quantization,
      scorer_quantization: null,
    };
    const stats = { positions: 0, top1: 0, outsideTopK: 0, confidentMismatches: v.evidence > 0 ? 1 : 0, evidence: v.evidence };
    moves.push({
      nodeId: r.node_id,
      jobId: r.check_id,
      modelId: r.model_id,
      check,
      evidence: v.evidence,
      stats,
      quantization: r.quantization,
      canary: true,
    });
  }
  await move(db, moves, out);
  return out;
}

/** The online nodes in good standing that declared `score`, per model. */
export async function scorersOf(db: Queryable, modelIds: number[], o: { onlineWindow: number; modelsTtl: number }): Promise<Map<number, number[]>> {
  const rows = await db.query<{ model_id: number; nodes: number[] }>(SCORERS, [modelIds, o.onlineWindow, o.modelsTtl, CAPABILITIES.score]);
  return new Map(rows.map((r) => [r.model_id, r.nodes]));
}

/** Moves the nodes' tests (locked in order), records each check's summary, and lists the nodes brought to H. */
async function move(db: Queryable, moves: Move[], out: ScoreVerdicts): Promise<void> {
  if (moves.length === 0) return;
  const pairs = [...new Map(moves.map((m) => [`${m.nodeId}:${m.modelId}`, [m.nodeId, m.modelId] as const])).values()].sort(
    (a, b) => a[0] - b[0] || a[1] - b[1],
  );
  await db.query(ENSURE, [pairs.map((p) => p[0]), pairs.map((p) => p[1])]);
  const tests = new Map(
    (
      await db.query<{ node_id: number; model_id: number; cusum: number; answers: number; flagged_at: string | null }>(LOCK, [
        pairs.map((p) => p[0]),
        pairs.map((p) => p[1]),
      ])
    ).map((r) => [
      `${r.node_id}:${r.model_id}`,
      { row: r, test: { ...freshTest(), sum: r.cusum, answers: r.answers }, positions: 0, mismatches: 0, flags: 0 },
    ]),
  );
  const records: unknown[][] = Array.from({ length: 12 }, () => []);
  for (const m of moves) {
    const t = tests.get(`${m.nodeId}:${m.modelId}`)!;
    t.test = observe(t.test, { ...m.stats, evidence: m.evidence });
    t.positions += m.stats.positions;
    t.mismatches += m.stats.confidentMismatches;
    [
      m.check.check_id,
      m.jobId,
      m.nodeId,
      m.modelId,
      m.check.checker_id,
      m.check.scores?.method ?? 'none',
      m.stats.positions,
      m.stats.top1,
      m.stats.confidentMismatches,
      m.evidence,
      t.test.sum,
      m.quantization,
    ].forEach((v, i) => records[i]!.push(v));
    if (!t.test.flagged) continue;
    out.flagged.push({
      nodeId: m.nodeId,
      jobId: m.jobId,
      covers: [],
      evidence: {
        cusum: Math.round(t.test.sum * 1000) / 1000,
        threshold: Math.round(H * 1000) / 1000,
        answers: t.test.answers,
        model_id: m.modelId,
        check: m.check.check_id,
        ...(m.canary
          ? { canary_of_job: m.check.job_id }
          : m.jobId === m.check.job_id
            ? { checked_by: m.check.checker_id }
            : { as_scorer_of_job: m.check.job_id, contradicted_by: m.check.checker_id }),
      },
    });
    // The test starts again from 0 (token_checks keeps what brought it to H).
    t.flags++;
    t.test = { ...freshTest(), answers: t.test.answers };
  }
  await db.query(RECORD, records);
  const saved = [...tests.values()];
  await db.query(SAVE, [
    saved.map((t) => t.row.node_id),
    saved.map((t) => t.row.model_id),
    saved.map((t) => t.test.sum),
    saved.map((t) => t.test.answers),
    saved.map((t) => t.positions),
    saved.map((t) => t.mismatches),
    saved.map((t) => t.flags),
  ]);
  for (const f of out.flagged) {
    const t = tests.get(`${f.nodeId}:${f.evidence.model_id as number}`)!;
    // The node's own jobs that moved its test: its answers, and as a scorer its contradicted checks.
    f.covers = (await db.query<{ job_id: string }>(COVERED, [f.nodeId, f.evidence.model_id, t.row.flagged_at])).map((r) => r.job_id);
    f.evidence.jobs = f.covers.length;
  }
}
