// Copies of a done job for other nodes: a share of the temperature-0 jobs, every job of a node
// on probation, every probe, every answer that looked replayed — and a third copy when two
// answers disagree. A copy is a job like any other on the wire (its request is the original's,
// seed included), owned by nobody, dispatched first and never to a node that ran the job; only
// when an online node can run it (it declared the capabilities the job needs), and preferably
// by a node that declared the same quantisation as the node judged. The lifecycle queues them
// (jobs/sql/queue-checks.ts); this module decides which, and where.
import { randomUUID } from 'node:crypto';
import { sql, type Queryable } from '../db/database.js';
import { servingSession } from '../db/rules/live.js';
import type { Outcome } from '../jobs/outcome.js';
import { chatsSql } from '../jobs/capabilities.js';
import type { Check } from '../jobs/sql/queue-checks.js';

export interface CopyPlan {
  of: string;
  modelId: number;
  exclude: number[];
  suspicion: Record<string, unknown> | null;
}

// Online nodes in good standing serving each of the models $1 (NULL: every model) for chat ($2
// the online window, $3 MODELS_TTL, in seconds): which models a probe — a chat job — can check
// (verify/probes.ts), and on which nodes. A node serving the model as an embedding model only
// (jobs/capabilities.ts chatsSql) would answer a probe with its backend's error, not a text.
export const ELIGIBLE = sql(
  'verify_eligible_nodes',
  `SELECT d.model_id, array_agg(DISTINCT s.node_id)::int[] AS nodes
  FROM node_sessions s JOIN nodes n ON n.id = s.node_id CROSS JOIN LATERAL unnest(s.models, s.model_caps) AS d(model_id, caps)
  WHERE ($1::int[] IS NULL OR d.model_id = ANY($1::int[])) AND ${chatsSql('d.caps')} AND ${servingSession('s', 'n', '$2', '$3')}
  GROUP BY d.model_id`,
);

/** The nodes that may run jobs of each model (all models when `modelIds` is null). */
export async function eligibleNodes(
  db: Queryable,
  modelIds: number[] | null,
  onlineWindow: number,
  modelsTtl: number,
): Promise<Map<number, number[]>> {
  const rows = await db.query<{ model_id: number; nodes: number[] }>(ELIGIBLE, [modelIds, onlineWindow, modelsTtl]);
  return new Map(rows.map((r) => [r.model_id, r.nodes]));
}

// For each copy to make ($1 the jobs copied, $2 the node each judges; $3 the online window, $4
// MODELS_TTL, in seconds; $5 capabilities the check needs beyond the job's own: `score` for a
// score check), the online nodes in good standing serving the job's model that can run it —
// they declared every capability it needs (jobs.needs, jobs/capabilities.ts): a copy no node
// can lease would only wait out its deadline — and among them those that declared the same
// quantisation for the model as the judged node's live session did (issue 31,
// nodes/sql/declare.ts; none when the judged node declared none).
export const CHECKERS = sql(
  'verify_copy_checkers',
  `WITH p AS (
    SELECT p.of, p.judged, j.model_id, j.needs | $5::int AS needs FROM unnest($1::uuid[], $2::bigint[]) AS p(of, judged) JOIN jobs j ON j.id = p.of),
  live AS (
    SELECT s.node_id, d.model_id, coalesce(s.model_caps[d.i::int], 0) AS caps, b.quantization
    FROM node_sessions s JOIN nodes n ON n.id = s.node_id CROSS JOIN LATERAL unnest(s.models) WITH ORDINALITY AS d(model_id, i)
      LEFT JOIN session_model_builds b ON b.session_id = s.id AND b.model_id = d.model_id
    WHERE d.model_id IN (SELECT model_id FROM p) AND ${servingSession('s', 'n', '$3', '$4')})
  SELECT p.of::text AS of,
    coalesce(array_agg(DISTINCT l.node_id::int) FILTER (WHERE p.needs & ~l.caps = 0), '{}') AS able,
    coalesce(array_agg(DISTINCT l.node_id::int) FILTER (WHERE p.needs & ~l.caps = 0 AND l.quantization = q.quantization), '{}') AS same_quantization
  FROM p JOIN live l ON l.model_id = p.model_id
    LEFT JOIN LATERAL (SELECT x.quantization FROM live x WHERE x.node_id = p.judged AND x.model_id = p.model_id AND x.quantization IS NOT NULL LIMIT 1) q ON true
  GROUP BY p.of`,
);

/**
 * Where each plan's copy (or score check: `extraNeeds` the `score` bit) may go: the nodes
 * outside its exclusions that can run it, preferring those that declared the judged node's
 * quantisation — when one of them is online, the others are excluded too (appended: exclude[0]
 * stays the judged node); when none is, any able node may run it. Plans no node can run are
 * left out.
 */
export async function placeCopies(db: Queryable, plans: CopyPlan[], onlineWindow: number, modelsTtl: number, extraNeeds = 0): Promise<CopyPlan[]> {
  if (plans.length === 0) return [];
  const rows = await db.query<{ of: string; able: number[]; same_quantization: number[] }>(CHECKERS, [
    plans.map((p) => p.of),
    plans.map((p) => p.exclude[0] ?? null),
    onlineWindow,
    modelsTtl,
    extraNeeds,
  ]);
  const by = new Map(rows.map((r) => [r.of, r]));
  return plans.flatMap((p) => {
    const r = by.get(p.of);
    const able = (r?.able ?? []).filter((n) => !p.exclude.includes(n));
    if (able.length === 0) return [];
    const same = (r?.same_quantization ?? []).filter((n) => !p.exclude.includes(n));
    return [same.length === 0 ? p : { ...p, exclude: [...p.exclude, ...able.filter((n) => !same.includes(n))] }];
  });
}

/** Where checks are queued: the job lifecycle (jobs/lifecycle.ts queueChecks). */
export interface CheckQueue {
  queueChecks(tx: Queryable, checks: readonly Check[], deadlineSeconds: number): Promise<Outcome>;
}

export interface CopyOptions {
  onlineWindow: number;
  modelsTtl: number;
  deadline: number;
  checks: CheckQueue;
}

/** The plans some node outside their exclusions can run, queued; answers the plans made and the outcome to apply once the transaction commits. */
export async function queueCopies(db: Queryable, plans: CopyPlan[], opts: CopyOptions): Promise<{ outcome: Outcome | undefined; made: CopyPlan[] }> {
  if (plans.length === 0) return { outcome: undefined, made: [] };
  const placed = new Map((await placeCopies(db, plans, opts.onlineWindow, opts.modelsTtl)).map((p) => [p.of, p]));
  // `made` holds the plans themselves (the auditor asks which of its plans were made).
  const made = plans.filter((p) => placed.has(p.of));
  if (made.length === 0) return { outcome: undefined, made };
  const outcome = await opts.checks.queueChecks(
    db,
    made.map((p) => ({ kind: 'verify' as const, id: randomUUID(), of: p.of, exclude: placed.get(p.of)!.exclude, suspicion: p.suspicion })),
    opts.deadline,
  );
  return { outcome, made };
}
