// Copies of a done job for other nodes: a share of the temperature-0 jobs, every job of a node
// on probation, every probe, every answer that looked replayed — and a third copy when two
// answers disagree. A copy is a job like any other on the wire (its request is the original's,
// seed included), owned by nobody, dispatched first and never to a node that ran the job. The
// lifecycle queues them (jobs/sql/queue-checks.ts); this module decides which.
import { randomUUID } from 'node:crypto';
import { sql, type Queryable } from '../db/database.js';
import { nodeSuspended } from '../nodes/sql/suspended.js';
import type { Outcome } from '../jobs/outcome.js';
import type { Check } from '../jobs/sql/queue-checks.js';

export interface CopyPlan { of: string; modelId: number; exclude: number[]; suspicion: Record<string, unknown> | null }

// Online nodes in good standing serving each of the models $1 (NULL: every model) ($2 the
// online window, $3 MODELS_TTL, in seconds): who may run a copy, and which models a probe can
// check (verify/probes.ts).
const ELIGIBLE = sql('verify_eligible_nodes', `SELECT d.model_id, array_agg(DISTINCT s.node_id)::int[] AS nodes
  FROM node_sessions s JOIN nodes n ON n.id = s.node_id CROSS JOIN LATERAL unnest(s.models) AS d(model_id)
  WHERE ($1::int[] IS NULL OR d.model_id = ANY($1::int[])) AND s.ended_at IS NULL AND n.disabled_at IS NULL AND n.key_hash = s.node_key_hash
    AND s.last_seen_at > now() - make_interval(secs => $2::float8) AND s.models_declared_at > now() - make_interval(secs => $3::float8)
    AND NOT ${nodeSuspended('s.node_id')}
  GROUP BY d.model_id`);

/** The nodes that may run jobs of each model (all models when `modelIds` is null). */
export async function eligibleNodes(db: Queryable, modelIds: number[] | null, onlineWindow: number, modelsTtl: number): Promise<Map<number, number[]>> {
  const rows = await db.query<{ model_id: number; nodes: number[] }>(ELIGIBLE, [modelIds, onlineWindow, modelsTtl]);
  return new Map(rows.map((r) => [r.model_id, r.nodes]));
}

/** Where checks are queued: the job lifecycle (jobs/lifecycle.ts queueChecks). */
export interface CheckQueue { queueChecks(tx: Queryable, checks: readonly Check[], deadlineSeconds: number): Promise<Outcome> }

export interface CopyOptions { onlineWindow: number; modelsTtl: number; deadline: number; checks: CheckQueue }

/** The plans some node outside their exclusions can run, queued; answers the plans made and the outcome to apply once the transaction commits. */
export async function queueCopies(db: Queryable, plans: CopyPlan[], opts: CopyOptions): Promise<{ outcome: Outcome | undefined; made: CopyPlan[] }> {
  if (plans.length === 0) return { outcome: undefined, made: [] };
  const eligible = await eligibleNodes(db, [...new Set(plans.map((p) => p.modelId))], opts.onlineWindow, opts.modelsTtl);
  const made = plans.filter((p) => (eligible.get(p.modelId) ?? []).some((n) => !p.exclude.includes(n)));
  if (made.length === 0) return { outcome: undefined, made };
  const outcome = await opts.checks.queueChecks(db, made.map((p) => ({ kind: 'verify' as const, id: randomUUID(), of: p.of, exclude: p.exclude, suspicion: p.suspicion })), opts.deadline);
  return { outcome, made };
}
