// Checked delivery (issue 55; docs/verification.md, "Checked delivery"): a held job's answer is
// given to its owner only once an independent check of it passed. The auditor (auditor.ts) calls
// in here, inside its batch's transaction:
// - every held answer it audits gets a check, whatever the node's check rate: a score check by
//   another node serving the model where one is online (one prefill), else a copy whose answer
//   must agree (the copy path's verdict, rules.ts); neither possible: `unchecked` at once;
// - a check that passed delivers the answer (`checked`); a copy path whose majority contradicts
//   the held answer delivers the majority's (two nodes agree on it);
// - a score check that did not pass re-runs the job on a node that has not answered it (a copy of
//   the job, held in the first answer's place: jobs.delivery_from), checked the same way; no such
//   node: `unchecked`.
// The checks and re-runs are ordinary copies and score checks: no node can tell a held job from
// any other. The states and their diagram: jobs/states.ts DELIVERY_STATES.
import { randomUUID } from 'node:crypto';
import { sql, type Queryable } from '../db/database.js';
import type { Outcome } from '../jobs/outcome.js';
import { placeCopies, type CheckQueue } from './copies.js';
import { PASS, RERUN, UNCHECKED } from '../jobs/sql/delivery.js';

// The held jobs among $1, and those whose candidate answer (a re-run, delivery_from) is among $1:
// each with its candidate (the job's own answer, or its re-run's).
const HELD = sql(
  'verify_held',
  `SELECT j.id::text AS job, coalesce(j.delivery_from, j.id)::text AS candidate FROM jobs j WHERE j.id = ANY($1::uuid[]) AND j.delivery = 'held'
  UNION ALL
  SELECT j.id::text, j.delivery_from::text FROM jobs j WHERE j.delivery = 'held' AND j.delivery_from = ANY($1::uuid[])`,
);
// Who may not re-run held jobs $1 (failed candidates $2): the failed candidate's node first,
// then every node that answered the job or a copy of it (not its score checks' scorers: they
// answered nothing), and the job's model.
const ANSWERED = sql(
  'verify_delivery_answered',
  `SELECT d.job::text AS job, j.model_id, c.node_id::int AS judged,
    ARRAY(SELECT DISTINCT l.node_id::int FROM job_leases l JOIN jobs x ON x.id = l.job_id
      WHERE (x.id = d.job OR x.verify_of = d.job) AND x.request -> 'params' -> 'score' IS NULL) AS nodes
  FROM unnest($1::uuid[], $2::uuid[]) AS d(job, candidate) JOIN jobs j ON j.id = d.job JOIN jobs c ON c.id = d.candidate`,
);

/** A held job and the answer it holds now (the job's own, or a re-run's). */
export interface Held {
  job: string;
  candidate: string;
}

/** The held jobs whose candidate is among `ids`: candidate → held job. */
export async function heldAmong(db: Queryable, ids: readonly string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const rows = await db.query<Held>(HELD, [ids]);
  return new Map(rows.map((r) => [r.candidate, r.job]));
}

/** Delivers: each held job's answer is `deliver`'s (a check of the candidate passed, or a majority agreed on `deliver`). Answers the jobs decided. */
export async function pass(db: Queryable, passed: readonly (Held & { deliver: string })[]): Promise<string[]> {
  if (passed.length === 0) return [];
  const rows = await db.query<{ id: string }>(PASS, [passed.map((p) => p.job), passed.map((p) => p.candidate), passed.map((p) => p.deliver)]);
  return rows.map((r) => r.id);
}

/** Nobody could check these held answers: withheld for good. Answers the jobs decided. */
export async function unchecked(db: Queryable, held: readonly Held[]): Promise<string[]> {
  if (held.length === 0) return [];
  const rows = await db.query<{ id: string }>(UNCHECKED, [held.map((h) => h.job), held.map((h) => h.candidate)]);
  return rows.map((r) => r.id);
}

export interface RerunOptions {
  onlineWindow: number;
  modelsTtl: number;
  deadline: number;
  checks: CheckQueue;
}

/**
 * The candidates failed their checks: each held job runs again on a node that has not answered
 * it (a copy of the job, on the wire any copy), held in the failed answer's place; with no such
 * node online, the job is `unchecked`. Answers the outcome to apply once the transaction
 * commits, the re-runs queued and the jobs decided (unchecked).
 */
export async function rerun(
  db: Queryable,
  failed: readonly Held[],
  o: RerunOptions,
): Promise<{ outcome: Outcome | undefined; reruns: number; decided: string[] }> {
  if (failed.length === 0) return { outcome: undefined, reruns: 0, decided: [] };
  const rows = await db.query<{ job: string; model_id: number; judged: number; nodes: number[] }>(ANSWERED, [
    failed.map((f) => f.job),
    failed.map((f) => f.candidate),
  ]);
  const plans = rows.map((r) => ({ of: r.job, modelId: r.model_id, exclude: [r.judged, ...r.nodes.filter((n) => n !== r.judged)], suspicion: null }));
  const placed = await placeCopies(db, plans, o.onlineWindow, o.modelsTtl);
  const checks = placed.map((p) => ({ kind: 'verify' as const, id: randomUUID(), of: p.of, exclude: p.exclude, suspicion: null }));
  const candidate = new Map(failed.map((f) => [f.job, f.candidate]));
  const outcome = checks.length ? await o.checks.queueChecks(db, checks, o.deadline) : undefined;
  if (checks.length) await db.query(RERUN, [checks.map((c) => c.of), checks.map((c) => candidate.get(c.of)!), checks.map((c) => c.id)]);
  const none = failed.filter((f) => !checks.some((c) => c.of === f.job));
  return { outcome, reruns: checks.length, decided: await unchecked(db, none) };
}
