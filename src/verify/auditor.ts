// The auditor: every done job is checked once, off the request path, in batches, by whichever
// server takes it first (FOR UPDATE SKIP LOCKED over the queue job_audits):
// - speed: more output tokens per second of lease time than the model's cap → strike;
// - replay: the node gave the same answer (whitespace and case aside), or a near copy, to a
//   different prompt among its recent answers (verify/answers.ts) → the job is run again by
//   another node; if that node's answer contradicts it, a `replay` strike (with no other node
//   to ask, at once; if the two agree, it was a stock answer after all);
// - redundancy: a temperature-0 job (every probe, every job of a node on probation, else
//   VERIFY_SHARE of them) is run again by another node (verify/copies.ts); when the two
//   disagree, by a third; the node the majority contradicts gets a strike, those that agree
//   an agreement (verify/rules.ts verdict).
// A strike takes back the points of the job it is about; strikes and agreements move the
// node's standing (verify/standing.ts), and a suspension reverses its points of the evidence
// window (verify/reversal.ts). Everything of a batch commits together; what it caused is told
// afterwards, once.
import { randomUUID } from 'node:crypto';
import { sql, type Database, type Queryable } from '../db/database.js';
import type { VerifyConfig } from '../config-verify.js';
import { simhash, textHash } from './text.js';
import { outputTokens, tooFast, verdict, wordCount, type Answered } from './rules.js';
import { agree, strike, type Standing, type StrikeKind } from './standing.js';
import { rememberAndMatch } from './answers.js';
import { queueCopies, type CopyPlan } from './copies.js';
import { reverse } from './reversal.js';

interface Done {
  id: string; kind: 'user' | 'probe' | 'verify'; verify_of: string | null; suspicion: Record<string, unknown> | null;
  node_id: number; model_id: number; model: string;
  request: { messages: { role: string; content: string }[]; temperature: number };
  content: string; completion_tokens: number | null; lease_seconds: number | null; standing: Standing;
}

/** Most jobs one audit transaction takes. */
export const AUDIT_BATCH = 500;
/** SimHashes at most this many bits apart are near copies. */
const NEAR_BITS = 3;

// $1 most jobs. Takes the oldest done jobs waiting for the audit out of the queue (the batch's
// transaction commits the audit with it), with what the audit needs; the lease that did the
// job gives its time.
const TAKE = sql('verify_take', `WITH taken AS (
    DELETE FROM job_audits a WHERE a.job_id IN (SELECT job_id FROM job_audits ORDER BY finished_at LIMIT $1::int FOR UPDATE SKIP LOCKED)
    RETURNING a.job_id, a.finished_at)
  SELECT j.id::text, j.kind, j.verify_of::text, j.suspicion, j.node_id::int, j.model_id, m.name AS model, j.request,
    coalesce(j.result -> 'message' ->> 'content', '') AS content, (j.usage ->> 'completion_tokens')::int AS completion_tokens,
    (SELECT extract(epoch FROM l.ended_at - l.leased_at)::float8 FROM job_leases l WHERE l.job_id = j.id AND l.outcome = 'done' LIMIT 1) AS lease_seconds,
    coalesce((SELECT r.state FROM node_standing r WHERE r.node_id = j.node_id), 'trusted') AS standing
  FROM taken t JOIN jobs j ON j.id = t.job_id JOIN models m ON m.id = j.model_id ORDER BY t.finished_at, j.id`);
// The originals of the batch's copies ($1), locked in id order so that one server judges each
// at a time (an original was audited before any copy of it existed, so no batch holds it).
const LOCK_ORIGINALS = sql('verify_lock_originals', 'SELECT id FROM jobs WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE');
// Each original ($1) and its copies, done, in order.
const ANSWERS = sql('verify_answers', `SELECT j.id::text, coalesce(j.verify_of, j.id)::text AS original, j.node_id::int AS "nodeId",
    coalesce(j.result -> 'message' ->> 'content', '') AS content, j.suspicion
  FROM jobs j WHERE (j.id = ANY($1::uuid[]) OR j.verify_of = ANY($1::uuid[])) AND j.state = 'done' ORDER BY j.submitted_at, j.id`);

export interface AuditReport {
  audited: number;
  copies: number;
  agreements: number;
  disagreements: number;
  strikes: { kind: StrikeKind; nodeId: number }[];
  suspended: { nodeId: number; results: number; points: number }[];
  /** Points taken back by this batch (strikes' jobs and suspensions). */
  reversedPoints: number;
  /** Jobs queued (copies), per model: waiting workers may take them. */
  queued: Map<number, number>;
}

export interface AuditorOptions { verify: VerifyConfig; server: string; onlineWindow: number; modelsTtl: number; jobTimeout: number }

const promptText = (d: Done): string => d.request.messages.map((m) => `${m.role}: ${m.content}`).join('\n');

/** Audits up to AUDIT_BATCH done jobs in one transaction; undefined when there were none. */
export async function auditBatch(db: Database, opts: AuditorOptions): Promise<AuditReport | undefined> {
  return db.transaction(async (tx) => {
    const done = await tx.query<Done>(TAKE, [AUDIT_BATCH]);
    if (done.length === 0) return undefined;
    const batch = new Batch(tx, opts);
    await batch.audit(done);
    return batch.report;
  });
}

class Batch {
  readonly report: AuditReport = { audited: 0, copies: 0, agreements: 0, disagreements: 0, strikes: [], suspended: [], reversedPoints: 0, queued: new Map() };
  private readonly plans: CopyPlan[] = [];
  private readonly agreed: number[] = [];
  private readonly struck: { nodeId: number; jobId: string; kind: StrikeKind; evidence: Record<string, unknown> }[] = [];

  constructor(private readonly tx: Queryable, private readonly opts: AuditorOptions) {}

  async audit(done: Done[]): Promise<void> {
    const v = this.opts.verify;
    this.report.audited = done.length;
    for (const d of done) {
      const fast = tooFast(d.model, outputTokens(d.content, d.completion_tokens), d.lease_seconds, v);
      if (fast) this.struck.push({ nodeId: d.node_id, jobId: d.id, kind: 'too_fast', evidence: { tokens_per_second: Math.round(fast.rate), cap: fast.cap, seconds: d.lease_seconds } });
    }
    const suspects = await this.replays(done);
    await this.judge(done.filter((d) => d.kind === 'verify'));
    // A report that raced with its node's suspension was credited (its statement saw the node
    // in good standing), after the suspension's reversal took its snapshot: take it back now.
    // (Across servers, the maintenance round catches what this misses.)
    const late = done.filter((d) => d.standing === 'suspended').map((d) => d.id);
    this.report.reversedPoints += (await reverse(this.tx, { jobIds: late }, 'suspended')).points;
    for (const d of done) {
      if (d.kind === 'verify' || d.standing === 'suspended') continue;
      const suspicion = suspects.get(d.id) ?? null;
      if (suspicion || d.kind === 'probe' || (d.request.temperature === 0 && (d.standing === 'probation' || Math.random() < v.share))) {
        this.plans.push({ of: d.id, modelId: d.model_id, exclude: [d.node_id], suspicion });
      }
    }
    const { queued, made } = await queueCopies(this.tx, this.plans, { ...this.opts, deadline: this.opts.jobTimeout, newId: randomUUID });
    this.report.queued = queued;
    this.report.copies = made.length;
    // A suspected replay nobody else can check is judged on its own evidence.
    for (const p of this.plans) {
      const node = p.exclude[0]!;
      if (p.suspicion && !made.includes(p)) this.struck.push({ nodeId: node, jobId: p.of, kind: 'replay', evidence: { ...p.suspicion, checked_by: 'nobody else serves the model' } });
    }
    await agree(this.tx, this.agreed, v.probationAgreements);
    this.report.agreements = this.agreed.length;
    await this.strikes();
  }

  /** The batch's answers that copy an earlier answer of their node (not copies: those are compared anyway). */
  private async replays(done: Done[]): Promise<Map<string, Record<string, unknown>>> {
    const v = this.opts.verify;
    const long = done.map((d) => ({ d, words: wordCount(d.content) })).filter((x) => x.words >= v.minWordsForReplay);
    const matches = await rememberAndMatch(this.tx, long.map(({ d, words }) => ({
      nodeId: d.node_id, jobId: d.id, promptHash: textHash(promptText(d)), answerHash: textHash(d.content), simhash: simhash(d.content),
      nearToo: words >= 3 * v.minWordsForReplay,
    })), v.evidenceWindow, NEAR_BITS);
    const kinds = new Map(done.map((d) => [d.id, d.kind]));
    return new Map(matches.filter((m) => !m.stock && kinds.get(m.jobId) !== 'verify')
      .map((m) => [m.jobId, { same_as_job: m.sameAs, exact: m.exact, simhash_distance: m.distance }]));
  }

  /** Copies are done: judge each original's answers when they allow it. */
  private async judge(copies: Done[]): Promise<void> {
    if (copies.length === 0) return;
    const originals = [...new Set(copies.map((c) => c.verify_of!))];
    const modelOf = new Map(copies.map((c) => [c.verify_of!, c.model_id]));
    await this.tx.query(LOCK_ORIGINALS, [originals]);
    const groups = new Map<string, (Answered & { suspicion: Record<string, unknown> | null })[]>();
    for (const row of await this.tx.query<Answered & { original: string; suspicion: Record<string, unknown> | null }>(ANSWERS, [originals])) {
      groups.set(row.original, [...(groups.get(row.original) ?? []), row]);
    }
    for (const original of originals) {
      const rows = groups.get(original) ?? [];
      if (rows[0]?.id !== original) continue;
      const v = verdict(rows, this.opts.verify.similarity);
      if (v.kind === 'agree') {
        this.agreed.push(...v.members.map((m) => m.nodeId));
      } else if (v.kind === 'third') {
        this.report.disagreements++;
        const copy = rows[1]!;
        // An answer that copied an earlier one, and that another node contradicts: two signals, a strike.
        if (copy.suspicion) this.struck.push({ nodeId: rows[0].nodeId, jobId: original, kind: 'replay', evidence: { ...copy.suspicion, contradicted_by_job: copy.id } });
        else this.plans.push({ of: original, modelId: modelOf.get(original)!, exclude: [rows[0].nodeId, copy.nodeId], suspicion: null });
      } else if (v.kind === 'odd') {
        this.struck.push({ nodeId: v.odd.nodeId, jobId: v.odd.id, kind: 'disagreement', evidence: { job: original, majority_jobs: v.majority.map((m) => m.id), similarity: v.similarity } });
        this.agreed.push(...v.majority.map((m) => m.nodeId));
      }
    }
  }

  /** Strikes in order; each takes its job's points back, and a suspension the node's window. */
  private async strikes(): Promise<void> {
    const v = this.opts.verify;
    const suspended: number[] = [];
    for (const s of this.struck) {
      const { before, after } = await strike(this.tx, s.nodeId, s.jobId, s.kind, s.evidence, v.evidenceWindow, v.strikesToSuspend);
      this.report.strikes.push({ kind: s.kind, nodeId: s.nodeId });
      if (after === 'suspended' && before !== 'suspended') suspended.push(s.nodeId);
    }
    this.report.reversedPoints += (await reverse(this.tx, { jobIds: this.struck.map((s) => s.jobId) }, 'strike')).points;
    for (const nodeId of suspended) {
      const r = await reverse(this.tx, { nodes: [{ nodeId, seconds: v.evidenceWindow }] }, 'suspended');
      this.report.suspended.push({ nodeId, ...r });
      this.report.reversedPoints += r.points;
    }
  }
}
