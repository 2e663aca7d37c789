// The auditor: every done job is checked once, off the request path, in batches, by whichever
// server takes it first (FOR UPDATE SKIP LOCKED over the queue job_audits):
// - speed: more output tokens per second of lease time than the model's cap → strike;
// - replay: the node gave the same answer (whitespace and case aside), or a near copy, to a
//   different prompt among its recent answers (verify/answers.ts) → the job is run again by
//   another node; if that node's answer contradicts it, a third node decides, and the majority
//   contradicting it is a `replay` strike (with no third node online, the two signals are one at
//   once; with no other node at all, it stays a suspicion; if the two agree, it was a stock
//   answer after all). A copy's answer that
//   replays is compared anyway: the majority contradicting it makes a `replay` strike rather
//   than a `disagreement` (cheats cannot tell copies from users' jobs);
// - redundancy: a temperature-0 or embeddings job (every probe, every job of a node on probation, else
//   its node's check rate of them: VERIFY_SHARE, falling with its run of agreements, check-rate.ts) is run again by another node (verify/copies.ts); when the two
//   disagree, by a third; the node the majority contradicts gets a strike, those that agree
//   an agreement (verify/rules.ts verdict);
// - request errors: a copy that audits a node's claim that a job's request was at fault
//   (verify/request-errors.ts), answered by another node, is a `false_request_error` strike;
// - failed jobs: a copy that audits a job its nodes failed (verify/failed-jobs.ts), answered by
//   another node, makes their failed attempts count (verify/failures.ts).
// A strike takes back the points of the job it is about; strikes and agreements move the
// node's standing (verify/standing.ts), and a suspension reverses its points of the evidence
// window (verify/reversal.ts). Everything of a batch commits together; what it caused is told
// afterwards, once.
//
// One job must not stop the audit of all: when a batch fails (anything but a database
// outage), its jobs are taken again and audited one by one, each in a savepoint of its own,
// and a job whose audit fails alone is set aside — taken off the queue unaudited, and told
// (logged, counted as ins_verification_total{event="set_aside"}) — while the others are
// audited. Values a node sent are read defensively (its token count is clamped to an int).
import { sql, type Database, type Queryable } from '../db/database.js';
import type { Outcome } from '../jobs/outcome.js';
import type { NodeOutcome } from '../nodes/outcome.js';
import { isRetryable, isUnavailable } from '../db/errors.js';
import type { VerifyConfig } from '../config-verify.js';
import { simhash, textHash } from './text.js';
import { outputTokens, tooFast, verdict, wordCount, type Answered } from './rules.js';
import { agree, strike, type Standing, type StrikeKind } from './standing.js';
import { checkRate } from './check-rate.js';
import { rememberAndMatch } from './answers.js';
import { queueCopies, type CheckQueue, type CopyPlan } from './copies.js';
import { reverse } from './reversal.js';
import { countChecks, isCanaryAnswer, isScoreCheck, judgeCanaryAnswers, judgeScores, queueScores } from './scores.js';
import { deterministic, kindOf } from './compare.js';
import type { ChatParams } from '../jobs/request.js';
import { auditsClaim, falseClaims } from './request-errors.js';
import { auditsFailure, failuresShown } from './failed-jobs.js';
import { heldAmong, pass, rerun, unchecked, type Held } from './delivery.js';

interface Done {
  id: string;
  kind: 'user' | 'probe' | 'verify';
  verify_of: string | null;
  suspicion: Record<string, unknown> | null;
  node_id: number;
  model_id: number;
  model: string;
  request: { messages: { role: string; content: string }[]; temperature: number; params?: ChatParams };
  /** The node's own part of the answer: all of it, but for a job it continued from another node's beginning. */
  content: string;
  completion_tokens: number | null;
  lease_seconds: number | null;
  standing: Standing;
  /** The node's agreements in a row (node_standing.clean_streak): how often its jobs are checked (check-rate.ts). */
  run: number;
  /** Every node that held a lease of the job (the finishing one among them): none of them may run its copies. */
  holders: number[];
}

/** Most jobs one audit transaction takes. */
export const AUDIT_BATCH = 500;
/** SimHashes at most this many bits apart are near copies. */
const NEAR_BITS = 3;

// What the audit reads of a job (j, with its model m, its answer x and the lease l that did it).
// The lease gives the node's time, its usage and the beginning it was handed: speed and replay
// judge each node only by its own part (a node that continued another's answer wrote what
// follows that beginning). The node's token count is any JSON it sent: clamped into an int,
// null unless a number. The holders are every node that had a lease of the job: a copy goes to
// none of them (docs/verification.md), so a continued job is judged by a node that had no part
// in it.
const DONE_COLUMNS = `j.id::text, j.kind, j.verify_of::text, j.suspicion, j.node_id::int, j.model_id, m.name AS model, j.request,
    CASE WHEN l.prefix <> '' AND starts_with(x.content, l.prefix) THEN substr(x.content, char_length(l.prefix) + 1) ELSE x.content END AS content,
    CASE WHEN jsonb_typeof(l.usage -> 'completion_tokens') = 'number'
      THEN least(greatest((l.usage ->> 'completion_tokens')::numeric, 0), 2147483647)::int END AS completion_tokens,
    extract(epoch FROM l.ended_at - l.leased_at)::float8 AS lease_seconds,
    ARRAY(SELECT DISTINCT h.node_id::int FROM job_leases h WHERE h.job_id = j.id) AS holders,
    coalesce(r.state, 'trusted') AS standing, coalesce(r.clean_streak, 0) AS run`;
const DONE_FROM = `jobs j JOIN models m ON m.id = j.model_id
  CROSS JOIN LATERAL (SELECT coalesce(j.result -> 'message' ->> 'content', '') AS content) x
  LEFT JOIN LATERAL (SELECT * FROM job_leases l WHERE l.job_id = j.id AND l.outcome = 'done' LIMIT 1) l ON true
  LEFT JOIN node_standing r ON r.node_id = j.node_id`;
// $1 most jobs: the oldest done jobs waiting for the audit, taken out of the queue (the
// transaction commits the audit with it).
const TAKEN = `DELETE FROM job_audits a WHERE a.job_id IN (SELECT job_id FROM job_audits ORDER BY finished_at LIMIT $1::int FOR UPDATE SKIP LOCKED)
    RETURNING a.job_id, a.finished_at`;
// The batch: the jobs taken, with what the audit needs.
const TAKE = sql(
  'verify_take',
  `WITH taken AS (${TAKEN})
  SELECT ${DONE_COLUMNS}
  FROM taken t JOIN ${DONE_FROM} ON j.id = t.job_id ORDER BY t.finished_at, j.id`,
);
// After a failed batch: the jobs taken alone, then each one's data ($1) in its savepoint.
const TAKE_IDS = sql('verify_take_ids', `WITH taken AS (${TAKEN}) SELECT job_id::text AS id FROM taken ORDER BY finished_at, job_id`);
const LOAD = sql('verify_load', `SELECT ${DONE_COLUMNS} FROM ${DONE_FROM} WHERE j.id = $1::uuid`);
// The originals of the batch's copies ($1), locked in id order so that one server judges each
// at a time (an original was audited before any copy of it existed, so no batch holds it).
const LOCK_ORIGINALS = sql('verify_lock_originals', 'SELECT id FROM jobs WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE');
// Each original ($1) and its copies, done, in order, with every node that held a lease of each
// (not its score checks: they carry no answer of their own, verify/scores.ts judges them; nor
// canaries sent as its copies, judged against their reference, verify/canaries.ts); their
// tool calls and vectors, and the request's parameters, to compare them by kind (compare.ts).
const ANSWERS = sql(
  'verify_answers',
  `SELECT j.id::text, coalesce(j.verify_of, j.id)::text AS original, j.node_id::int AS "nodeId",
    coalesce(j.result -> 'message' ->> 'content', '') AS content, j.result -> 'message' -> 'tool_calls' AS tool_calls,
    j.result -> 'embeddings' AS embeddings, j.request -> 'params' AS params, j.suspicion,
    ARRAY(SELECT DISTINCT h.node_id::int FROM job_leases h WHERE h.job_id = j.id) AS holders
  FROM jobs j WHERE (j.id = ANY($1::uuid[]) OR j.verify_of = ANY($1::uuid[])) AND j.state = 'done'
    AND j.request -> 'params' -> 'score' IS NULL AND NOT coalesce(j.suspicion ? 'canary', false) ORDER BY j.submitted_at, j.id`,
);

export interface AuditReport {
  audited: number;
  copies: number;
  agreements: number;
  disagreements: number;
  strikes: { kind: StrikeKind; nodeId: number }[];
  /** The node lifecycle's outcomes of the batch's strikes and agreements (struck, suspended, cleared): applied once committed. */
  nodes: NodeOutcome[];
  suspended: { nodeId: number; results: number; points: number }[];
  /** Points taken back by this batch (strikes' jobs and suspensions). */
  reversedPoints: number;
  /** The copies queued: the lifecycle's outcomes, to apply once the batch committed. */
  outcomes: Outcome[];
  /** Jobs whose audit failed on its own: taken off the queue unaudited, with the reason. */
  setAside: { jobId: string; error: string }[];
  /** Failed attempts shown to be their nodes' by a done audit of their job (verify/failed-jobs.ts): counted once committed (failures.ts). */
  nodeFailures: { nodeId: number; jobId: string }[];
  /** Issue 31 (verify/scores.ts): score checks queued, and score checks judged. */
  scoreChecks?: number;
  scoresJudged?: number;
  /** Confirmations whose two scorers found the answer foreign each in its own way: no verdict. */
  scorersDisagreed?: number;
  /** Score verdicts one party's word would have made, with no other scorer or node online to confirm them: no verdict (verify/scores.ts). */
  scoresUnconfirmed?: number;
  /** Suspected replays no other node could check: no verdict. */
  replaysUnchecked?: number;
  /** Checked delivery (delivery.ts): held jobs whose delivery this batch decided (their waiters here are woken once it commits), and re-runs queued. */
  delivered?: string[];
  reruns?: number;
}

export const emptyReport = (): AuditReport => ({
  audited: 0,
  copies: 0,
  agreements: 0,
  disagreements: 0,
  strikes: [],
  nodes: [],
  suspended: [],
  reversedPoints: 0,
  outcomes: [],
  setAside: [],
  nodeFailures: [],
});

function merge(into: AuditReport, r: AuditReport): void {
  into.audited += r.audited;
  into.copies += r.copies;
  into.agreements += r.agreements;
  into.disagreements += r.disagreements;
  into.strikes.push(...r.strikes);
  into.nodes.push(...r.nodes);
  into.suspended.push(...r.suspended);
  into.reversedPoints += r.reversedPoints;
  into.outcomes.push(...r.outcomes);
  into.setAside.push(...r.setAside);
  into.nodeFailures.push(...r.nodeFailures);
  into.scoreChecks = (into.scoreChecks ?? 0) + (r.scoreChecks ?? 0);
  into.scoresJudged = (into.scoresJudged ?? 0) + (r.scoresJudged ?? 0);
  into.scorersDisagreed = (into.scorersDisagreed ?? 0) + (r.scorersDisagreed ?? 0);
  into.scoresUnconfirmed = (into.scoresUnconfirmed ?? 0) + (r.scoresUnconfirmed ?? 0);
  into.replaysUnchecked = (into.replaysUnchecked ?? 0) + (r.replaysUnchecked ?? 0);
  into.delivered = [...(into.delivered ?? []), ...(r.delivered ?? [])];
  into.reruns = (into.reruns ?? 0) + (r.reruns ?? 0);
}

export interface AuditorOptions {
  verify: VerifyConfig;
  onlineWindow: number;
  modelsTtl: number;
  jobTimeout: number;
  checks: CheckQueue;
  /** The node lifecycle's server id, announcing the strikes (issue 53; nodes/sql/standing.ts). */
  server?: string;
}

/** The key of a third copy's suspicion naming the copy whose answer replayed an earlier one. */
const SUSPECT_JOB = 'replayed_in_job';
const suspectJob = (suspicion: Record<string, unknown>): string | undefined =>
  typeof suspicion[SUSPECT_JOB] === 'string' ? suspicion[SUSPECT_JOB] : undefined;
/** The nodes a copy must not go to: the one judged first (replay strikes name exclude[0]), then every other that held a lease. */
const holdersFirst = (judged: number, holders: readonly number[]): number[] => [judged, ...new Set(holders.filter((n) => n !== judged))];

const promptText = (d: Done): string => d.request.messages.map((m) => `${m.role}: ${m.content}`).join('\n');

/**
 * Audits up to AUDIT_BATCH done jobs in one transaction; undefined when there were none. A
 * batch that fails is audited again job by job (auditAlone).
 */
export async function auditBatch(db: Database, opts: AuditorOptions): Promise<AuditReport | undefined> {
  try {
    return await db.transaction(async (tx) => {
      const done = await tx.query<Done>(TAKE, [AUDIT_BATCH]);
      if (done.length === 0) return undefined;
      const batch = new Batch(tx, opts);
      await batch.audit(done);
      return batch.report;
    });
  } catch (err) {
    if (isUnavailable(err)) throw err;
    return auditAlone(db, opts);
  }
}

/** Up to AUDIT_BATCH jobs in one transaction, each audited in a savepoint; a job that fails alone is set aside. */
async function auditAlone(db: Database, opts: AuditorOptions): Promise<AuditReport | undefined> {
  return db.transaction(async (tx) => {
    const ids = await tx.query<{ id: string }>(TAKE_IDS, [AUDIT_BATCH]);
    if (ids.length === 0) return undefined;
    const report = emptyReport();
    for (const { id } of ids) {
      await tx.exec('SAVEPOINT audit_job');
      try {
        const batch = new Batch(tx, opts);
        await batch.audit(await tx.query<Done>(LOAD, [id]));
        await tx.exec('RELEASE SAVEPOINT audit_job');
        merge(report, batch.report);
      } catch (err) {
        // An outage or a deadlock is no fault of the job: the whole transaction fails (and is retried).
        if (isUnavailable(err) || isRetryable(err)) throw err;
        await tx.exec('ROLLBACK TO SAVEPOINT audit_job');
        report.setAside.push({ jobId: id, error: err instanceof Error ? err.message : String(err) });
      }
    }
    return report;
  });
}

class Batch {
  readonly report: AuditReport = emptyReport();
  private readonly plans: CopyPlan[] = [];
  private readonly agreed: number[] = [];
  /** Nodes party to a disagreement (either side: nobody knows yet which is wrong): their run of agreements ends. */
  private readonly doubted: number[] = [];
  private readonly struck: { nodeId: number; jobId: string; kind: StrikeKind; evidence: Record<string, unknown>; covers?: string[] }[] = [];
  /** Jobs picked only for a score check (sampled: a copy cannot judge them): not copied when no node can score them. */
  private readonly sampledOnly = new Set<string>();
  /** Jobs of this batch picked for a check: a score check may take them (a third copy of a text disagreement stays a copy). */
  private readonly picked = new Set<string>();
  /** Third copies asked for a replay another node contradicted: the strike to give when no node can run one. */
  private readonly contested = new Map<CopyPlan, (typeof this.struck)[number]>();
  /** Checked delivery (delivery.ts): answers held for a check, among this batch's jobs and their originals (candidate → held job). */
  private held = new Map<string, string>();
  /** Held answers that passed (deliver: whose answer), and those that failed a check. */
  private readonly passed: (Held & { deliver: string })[] = [];
  private readonly failed: Held[] = [];

  constructor(
    private readonly tx: Queryable,
    private readonly opts: AuditorOptions,
  ) {}

  async audit(done: Done[]): Promise<void> {
    const v = this.opts.verify;
    this.report.audited = done.length;
    for (const d of done) {
      const fast = tooFast(d.model, outputTokens(d.content, d.completion_tokens), d.lease_seconds, v);
      if (fast)
        this.struck.push({
          nodeId: d.node_id,
          jobId: d.id,
          kind: 'too_fast',
          evidence: { tokens_per_second: Math.round(fast.rate), cap: fast.cap, seconds: d.lease_seconds },
        });
    }
    const { suspects, copyReplays } = await this.replays(done);
    const copies = done.filter((d) => d.kind === 'verify');
    // Held answers among the batch, and among the originals its copies and score checks judge.
    this.held = await heldAmong(this.tx, [...new Set([...done.map((d) => d.id), ...copies.map((d) => d.verify_of!)])]);
    const checks = copies.filter((d) => !auditsClaim(d) && !auditsFailure(d));
    await this.judge(
      checks.filter((d) => !isScoreCheck(d.request) && !isCanaryAnswer(d.suspicion, d.request)),
      copyReplays,
    );
    await this.judgeScores(checks.filter((d) => isScoreCheck(d.request)));
    await this.judgeCanaries(checks.filter((d) => isCanaryAnswer(d.suspicion, d.request)));
    // A copy that audits a node's request-error claim (verify/request-errors.ts), answered: the claim was false.
    for (const s of falseClaims(copies)) this.struck.push({ ...s, kind: 'false_request_error' });
    // A copy that audits a job its nodes failed (verify/failed-jobs.ts), answered: their endings count against them.
    this.report.nodeFailures.push(...failuresShown(copies));
    // A report that raced with its node's suspension was credited (its statement saw the node
    // in good standing), after the suspension's reversal took its snapshot: take it back now.
    // (Across servers, the maintenance round catches what this misses.)
    const late = done.filter((d) => d.standing === 'suspended').map((d) => d.id);
    this.report.reversedPoints += (await reverse(this.tx, { jobIds: late }, 'suspended')).points;
    const heldPlans: CopyPlan[] = [];
    /** Held answers only a score check can judge: sampled ones, and re-runs (a copy of a copy is judged by nobody). */
    const scoreOnly = new Set<string>();
    for (const d of done) {
      // Checked delivery: a held answer is always checked, whatever its node's standing or check
      // rate — the one hook of checked delivery into the choice of jobs to check (delivery.ts). A
      // re-run (a copy) gets a score check only: a copy of a copy is no verdict here; as a copy of
      // the held job, judge() compares it with the job's other answers anyway.
      if (this.held.has(d.id) && !this.passed.some((p) => p.candidate === d.id) && !this.failed.some((f) => f.candidate === d.id)) {
        const plan = {
          of: d.id,
          modelId: d.model_id,
          exclude: holdersFirst(d.node_id, d.holders),
          suspicion: d.kind === 'verify' ? null : (suspects.get(d.id) ?? null),
        };
        this.plans.push(plan);
        heldPlans.push(plan);
        this.picked.add(d.id);
        if (d.kind === 'verify' || !deterministic(d.request)) this.sampledOnly.add(d.id);
        if (!deterministic(d.request)) scoreOnly.add(d.id);
        continue;
      }
      // A continued answer is checked like any other: its whole text against a copy by a node
      // that held no lease of it, and the node that finished it is the one judged.
      if (d.kind === 'verify' || d.standing === 'suspended') continue;
      const suspicion = suspects.get(d.id) ?? null;
      const rate = this.rateOf(d);
      if (suspicion || d.kind === 'probe' || (deterministic(d.request) && Math.random() < rate)) {
        this.plans.push({ of: d.id, modelId: d.model_id, exclude: holdersFirst(d.node_id, d.holders), suspicion });
        this.picked.add(d.id);
      } else if (Math.random() < rate) {
        // A sampled job: only a score check can judge it (verify/scores.ts).
        this.plans.push({ of: d.id, modelId: d.model_id, exclude: holdersFirst(d.node_id, d.holders), suspicion: null });
        this.sampledOnly.add(d.id);
        this.picked.add(d.id);
      }
    }
    // Token by token where a node can score the answer; the rest copied and compared as text (the weaker way).
    const scores = await queueScores(this.tx, this.plans, this.picked, this.sampledOnly, this.scoreOptions());
    if (scores.outcome) this.report.outcomes.push(scores.outcome);
    this.report.scoreChecks = (this.report.scoreChecks ?? 0) + scores.scored.length;
    this.plans.splice(0, this.plans.length, ...scores.rest);
    const { outcome, made } = await queueCopies(this.tx, this.plans, { ...this.opts, deadline: this.opts.jobTimeout });
    await countChecks(
      this.tx,
      scores.scored,
      made.filter((p) => !p.suspicion),
    );
    if (outcome) this.report.outcomes.push(outcome);
    this.report.copies = made.length;
    // A held answer nothing could be queued to check: withheld — but a re-run at temperature 0,
    // which the held job's copies judge as text (judge(), heldVerdict) when no scorer is online.
    const none = heldPlans.filter((p) => !scores.scored.includes(p) && !made.includes(p) && (this.held.get(p.of) === p.of || scoreOnly.has(p.of)));
    await this.deliveries(none.map((p) => ({ job: this.held.get(p.of)!, candidate: p.of })));
    // A suspected replay nobody else can check stays a suspicion: counted, never struck. The
    // same answer to different prompts is what an honest model gives to prompts that ask for the
    // same text (a user's "repeat this sentence", a refusal template), so on its own it let any
    // user suspend the one node of a model (two outside probes).
    this.report.replaysUnchecked = this.plans.filter((p) => p.suspicion && !made.includes(p) && !this.contested.has(p)).length;
    for (const [plan, s] of this.contested) if (!made.includes(plan)) this.struck.push(s);
    await agree(this.tx, this.agreed, v.probationAgreements, this.report, this.opts.server, this.doubted);
    this.report.agreements = this.agreed.length;
    await this.strikes();
  }

  /**
   * The batch's answers that copy an earlier answer of their node: the users' and probes'
   * (`suspects`: each is copied to another node), and the copies' (compared anyway; the
   * evidence names the strike if the majority contradicts them).
   */
  private async replays(
    done: Done[],
  ): Promise<{ suspects: Map<string, Record<string, unknown>>; copyReplays: Map<string, Record<string, unknown>> }> {
    const v = this.opts.verify;
    const long = done.map((d) => ({ d, words: wordCount(d.content) })).filter((x) => x.words >= v.minWordsForReplay);
    const matches = await rememberAndMatch(
      this.tx,
      long.map(({ d, words }) => ({
        nodeId: d.node_id,
        jobId: d.id,
        promptHash: textHash(promptText(d)),
        answerHash: textHash(d.content),
        simhash: simhash(d.content),
        nearToo: words >= 3 * v.minWordsForReplay,
      })),
      v.evidenceWindow,
      NEAR_BITS,
    );
    const kinds = new Map(done.map((d) => [d.id, d.kind]));
    const evidence = (m: (typeof matches)[number]): [string, Record<string, unknown>] => [
      m.jobId,
      { same_as_job: m.sameAs, exact: m.exact, simhash_distance: m.distance },
    ];
    const replayed = matches.filter((m) => !m.stock);
    return {
      suspects: new Map(replayed.filter((m) => kinds.get(m.jobId) !== 'verify').map(evidence)),
      copyReplays: new Map(replayed.filter((m) => kinds.get(m.jobId) === 'verify').map(evidence)),
    };
  }

  /**
   * Copies are done: judge each original's answers when they allow it. `copyReplays`: the
   * batch's copies whose answer copies an earlier answer of their node (to another prompt).
   */
  private async judge(copies: Done[], copyReplays: ReadonlyMap<string, Record<string, unknown>>): Promise<void> {
    if (copies.length === 0) return;
    const originals = [...new Set(copies.map((c) => c.verify_of!))];
    const modelOf = new Map(copies.map((c) => [c.verify_of!, c.model_id]));
    await this.tx.query(LOCK_ORIGINALS, [originals]);
    type Row = Answered & { original: string; suspicion: Record<string, unknown> | null; holders: number[]; params: ChatParams | null };
    const groups = new Map<string, Row[]>();
    for (const row of await this.tx.query<Row>(ANSWERS, [originals])) {
      groups.set(row.original, [...(groups.get(row.original) ?? []), row]);
    }
    for (const original of originals) {
      const rows = groups.get(original) ?? [];
      if (rows[0]?.id !== original) continue;
      const v = verdict(rows, this.opts.verify.similarity, kindOf(rows[0].params));
      this.heldVerdict(rows, kindOf(rows[0].params));
      if (v.kind === 'agree') {
        this.agreed.push(...v.members.map((m) => m.nodeId));
      } else if (v.kind === 'third') {
        this.report.disagreements++;
        const copy = rows[1]!;
        this.doubted.push(rows[0].nodeId, copy.nodeId);
        // An answer that copied an earlier one, and that another node contradicts: two signals. But
        // the contradicting node may be the one lying — a user can make an honest node repeat
        // itself (two prompts asking for one text), and a node working with that user answer the
        // copy wrong — so a third node decides where one is online (the odd answer is struck: a
        // replay if it is the original). With none, the two signals are a strike.
        if (copy.suspicion) {
          const evidence = { ...copy.suspicion, contradicted_by_job: copy.id };
          const third = {
            of: original,
            modelId: modelOf.get(original)!,
            exclude: holdersFirst(rows[0].nodeId, [copy.nodeId, ...rows[0].holders, ...copy.holders]),
            suspicion: { ...evidence, [SUSPECT_JOB]: original },
          };
          this.plans.push(third);
          this.contested.set(third, { nodeId: rows[0].nodeId, jobId: original, kind: 'replay', evidence });
        } else {
          // A copy that replayed an earlier answer of its node is the suspect: the third
          // answer's verdict on it is a replay, and with no third node, its own evidence is.
          const replayed = copyReplays.get(copy.id);
          const suspect = replayed ? copy.nodeId : rows[0].nodeId;
          this.plans.push({
            of: original,
            modelId: modelOf.get(original)!,
            exclude: holdersFirst(suspect, [rows[0].nodeId, copy.nodeId, ...rows[0].holders, ...copy.holders]),
            suspicion: replayed ? { ...replayed, [SUSPECT_JOB]: copy.id } : null,
          });
        }
      } else if (v.kind === 'odd') {
        // The odd answer is a replay when it copied an earlier answer of its node (the suspect a third copy names).
        const replay = rows.find((r) => r.suspicion && suspectJob(r.suspicion) === v.odd.id)?.suspicion;
        this.struck.push({
          nodeId: v.odd.nodeId,
          jobId: v.odd.id,
          kind: replay ? 'replay' : 'disagreement',
          evidence: { job: original, majority_jobs: v.majority.map((m) => m.id), similarity: v.similarity, ...replay },
        });
        this.agreed.push(...v.majority.map((m) => m.nodeId));
      }
    }
  }

  /** Score checks are done: their statistics move the audited nodes' tests (verify/scores.ts). */
  private async judgeScores(checks: Done[]): Promise<void> {
    if (checks.length === 0) return;
    const verdicts = await judgeScores(
      this.tx,
      checks.map((c) => c.id),
      this.scoreOptions(),
    );
    if (verdicts.outcome) this.report.outcomes.push(verdicts.outcome);
    this.report.scoresJudged = verdicts.judged;
    this.report.scorersDisagreed = verdicts.disagreed;
    this.report.scoresUnconfirmed = verdicts.unconfirmed;
    this.report.scoreChecks = (this.report.scoreChecks ?? 0) + verdicts.confirmations;
    this.agreed.push(...verdicts.agreed);
    this.doubted.push(...verdicts.doubted);
    // Checked delivery: a score check that finds a held answer in line delivers it. One that finds
    // it foreign has it run again once a second scorer agrees (judgeScores asks one where one is
    // online; else at once): one scorer's word does not discard an answer — a scorer running
    // another model finds every honest answer foreign, and re-running each would soon leave no
    // node that has not answered the job.
    for (const f of verdicts.firsts) {
      const job = this.held.get(f.jobId);
      if (job === undefined) continue;
      if (f.passes) this.passed.push({ job, candidate: f.jobId, deliver: f.jobId });
      else if (!f.confirming) this.failed.push({ job, candidate: f.jobId });
    }
    for (const f of verdicts.flagged)
      this.struck.push({ nodeId: f.nodeId, jobId: f.jobId, kind: 'impostor', evidence: f.evidence, covers: f.covers });
    // A scorer two others contradicted (verify/scores.ts): its check's point goes with the strike.
    for (const f of verdicts.falseScores) this.struck.push({ ...f, kind: 'false_score' });
  }

  /** Canaries answered as ordinary jobs (verify/canaries.ts): each against its reference's answer. */
  private async judgeCanaries(answers: Done[]): Promise<void> {
    if (answers.length === 0) return;
    const verdicts = await judgeCanaryAnswers(
      this.tx,
      answers.map((d) => d.id),
    );
    this.report.scoresJudged = (this.report.scoresJudged ?? 0) + verdicts.judged;
    this.agreed.push(...verdicts.agreed);
    this.doubted.push(...verdicts.doubted);
    for (const f of verdicts.flagged)
      this.struck.push({ nodeId: f.nodeId, jobId: f.jobId, kind: 'impostor', evidence: f.evidence, covers: f.covers });
  }

  /**
   * The probability that done job `d` is checked: its node's rate (check-rate.ts; 1 on
   * probation). The one place the auditor decides it (a job that must be checked whatever its
   * node's record overrides it here).
   */
  private rateOf(d: Done): number {
    return checkRate(d, this.opts.verify);
  }

  /**
   * Checked delivery: a group of answers to one job (the original and its copies) that holds a
   * held answer — the original's, or a re-run's among the copies. An answer another node's agrees
   * with is checked: the held one if it is, else one two other nodes agree on (delivered in its
   * place). None agreeing with another: with two answers a third is on its way (judge()); with
   * three or more the job runs again on a node that has not answered it (delivery.ts rerun).
   */
  private heldVerdict(rows: readonly Answered[], kind: ReturnType<typeof kindOf>): void {
    const job = rows[0]!.id;
    const held = rows.find((r) => this.held.get(r.id) === job);
    if (held === undefined) return;
    const agreed = (a: Answered) =>
      rows.some((r) => r.id !== a.id && r.nodeId !== a.nodeId && verdict([a, r], this.opts.verify.similarity, kind).kind === 'agree');
    const deliver = agreed(held) ? held : rows.find((r) => r.nodeId !== held.nodeId && agreed(r));
    if (deliver) this.passed.push({ job, candidate: held.id, deliver: deliver.id });
    else if (rows.length >= 3) this.failed.push({ job, candidate: held.id });
  }

  /** Checked delivery's decisions of this batch: deliveries, re-runs, and the answers nobody could check (delivery.ts). */
  private async deliveries(none: readonly Held[]): Promise<void> {
    const decided = [...(await pass(this.tx, this.passed)), ...(await unchecked(this.tx, none))];
    const passedNow = new Set(this.passed.map((p) => p.job));
    const failed = new Map(this.failed.filter((f) => !passedNow.has(f.job)).map((f) => [f.job, f]));
    const r = await rerun(this.tx, [...failed.values()], { ...this.opts, deadline: this.opts.jobTimeout });
    if (r.outcome) this.report.outcomes.push(r.outcome);
    this.report.delivered = [...decided, ...r.decided];
    this.report.reruns = r.reruns;
  }

  private scoreOptions() {
    return { ...this.opts, deadline: this.opts.jobTimeout, spotShare: this.opts.verify.spotShare };
  }

  /** Strikes in order; each takes its job's points back, and a suspension the node's window. */
  private async strikes(): Promise<void> {
    const v = this.opts.verify;
    const suspended: number[] = [];
    for (const s of this.struck) {
      // An impostor flag is a sequential test at its threshold: it suspends at once (verify/scores.ts).
      const limits = { windowSeconds: v.evidenceWindow, strikesToSuspend: s.kind === 'impostor' ? 1 : v.strikesToSuspend, server: this.opts.server };
      if (await strike(this.tx, s, limits, this.report)) suspended.push(s.nodeId);
    }
    this.report.reversedPoints += (await reverse(this.tx, { jobIds: this.struck.flatMap((s) => [s.jobId, ...(s.covers ?? [])]) }, 'strike')).points;
    for (const nodeId of suspended) {
      const r = await reverse(this.tx, { nodes: [{ nodeId, seconds: v.evidenceWindow }] }, 'suspended');
      this.report.suspended.push({ nodeId, ...r });
      this.report.reversedPoints += r.points;
    }
  }
}
