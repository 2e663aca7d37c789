// Canaries (issue 31; docs/verification.md "Canaries"): a second line behind score checks
// (scores.ts) for a model only one node serves, which no other node can check. When a score
// check finds an answer in line with the scorer's model, the answer is kept as a reference
// (migrations/0020_canaries.sql: at most CANARIES_PER_MODEL per model, the newest). When one
// node alone serves a model, the maintenance round (probes.ts) now and then asks it to score a
// reference: a score check like any other on the wire (the reference job's request, seed
// included, plus `params.score.answer`; needing `score`; queued as a check of that job), whose
// scores are judged as a score check's are (scores.ts judgeScores), except that the node
// judged is the one that scored: an honest reference path scored by another model looks
// foreign, by the declared model in line. Evidence moves the same per-node test.
// - Only a node that declared `score` for the model gets one (the check needs the bit).
// - A node is never sent a request it saw (as the job's node, its scorer, or an earlier
//   canary's): a second sight of the same request would tell it a canary. So each reference
//   checks each node once, and a lone node gets at most as many canaries as references exist
//   that it never saw; new references need a second node of the model online.
// - A reference is only as good as the two nodes that agreed on it: one whose answering node or
//   scorer is suspended since is not sent.
import { randomUUID } from 'node:crypto';
import { sql, type Queryable } from '../db/database.js';
import { doneQuantization } from '../nodes/sql/declared-build.js';
import { nodeSuspended } from '../nodes/sql/suspended.js';
import type { Check } from '../jobs/sql/queue-checks.js';
import type { JobRequest } from '../jobs/request.js';
import { scoreRequest } from './score-request.js';

/** References kept per model (the newest). */
export const CANARIES_PER_MODEL = 32;

// $1..$6 parallel: the jobs, their models, requests and answers, the nodes vouching for each
// (array literals: the answering node and the scorer), the nodes that saw each (array literals).
// The quantisation is the one the answering node's session declared when it ran the job.
const REMEMBER = sql('verify_canaries_remember', `INSERT INTO canaries (job_id, model_id, quantization, request, answer, vouched, seen)
  SELECT u.job_id, u.model_id,
    ${doneQuantization('u.job_id', 'u.model_id')},
    u.request, u.answer, u.vouched::bigint[], u.seen::bigint[]
  FROM unnest($1::uuid[], $2::int[], $3::jsonb[], $4::text[], $5::text[], $6::text[]) AS u(job_id, model_id, request, answer, vouched, seen)
  ON CONFLICT (job_id) DO NOTHING`);
// The models' ($1) references beyond the newest $2.
const FORGET = sql('verify_canaries_forget', `DELETE FROM canaries c WHERE c.model_id = ANY($1::int[]) AND c.job_id NOT IN (
  SELECT x.job_id FROM canaries x WHERE x.model_id = c.model_id ORDER BY x.at DESC, x.job_id LIMIT $2::int)`);
// For each model $1 and the lone node $2 serving it: one reference that node never saw, whose
// job is still kept (retention) and whose vouching nodes are in good standing — preferably one
// of the node's own declared quantisation, else any — marked as seen by the node.
const PICK = sql('verify_canaries_pick', `WITH picked AS (
  SELECT DISTINCT ON (u.model_id) c.job_id, c.model_id, c.request, c.answer, c.seen, u.node_id
  FROM unnest($1::int[], $2::bigint[]) AS u(model_id, node_id)
  JOIN canaries c ON c.model_id = u.model_id AND NOT (u.node_id = ANY(c.seen))
  LEFT JOIN LATERAL (SELECT b.quantization FROM node_sessions s JOIN session_model_builds b ON b.session_id = s.id AND b.model_id = u.model_id
    WHERE s.node_id = u.node_id AND s.ended_at IS NULL ORDER BY s.last_seen_at DESC LIMIT 1) q ON true
  WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.id = c.job_id)
    AND NOT EXISTS (SELECT 1 FROM unnest(c.vouched) AS v(node_id) WHERE ${nodeSuspended('v.node_id')})
  ORDER BY u.model_id, (c.quantization IS NOT DISTINCT FROM q.quantization) DESC, random()
),
marked AS (UPDATE canaries c SET seen = c.seen || p.node_id FROM picked p WHERE c.job_id = p.job_id)
SELECT p.job_id::text, p.model_id, p.request, p.answer, p.seen::int[] AS seen FROM picked p`);

/** An answer a score check found in line: a reference to keep. */
export interface Reference { jobId: string; modelId: number; request: JobRequest; answer: string; vouched: number[]; seen: number[] }

const literal = (ids: readonly number[]): string => `{${[...new Set(ids)].join(',')}}`;

/** Keeps the references (a batch's last CANARIES_PER_MODEL of each model at most), then only the newest CANARIES_PER_MODEL of their models. */
export async function remember(db: Queryable, refs: readonly Reference[]): Promise<void> {
  const perModel = new Map<number, Reference[]>();
  for (const r of refs) perModel.set(r.modelId, [...(perModel.get(r.modelId) ?? []), r].slice(-CANARIES_PER_MODEL));
  const kept = [...perModel.values()].flat();
  if (kept.length === 0) return;
  await db.query(REMEMBER, [kept.map((r) => r.jobId), kept.map((r) => r.modelId), kept.map((r) => JSON.stringify(r.request)), kept.map((r) => r.answer),
    kept.map((r) => literal(r.vouched)), kept.map((r) => literal(r.seen))]);
  await db.query(FORGET, [[...perModel.keys()], CANARIES_PER_MODEL]);
}

/**
 * The canaries for the lone nodes of these models (a score check of a stored reference each,
 * for models that have one the node never saw), to queue with the round's probes.
 */
export async function canaries(db: Queryable, lone: readonly { modelId: number; nodeId: number }[]): Promise<{ checks: Check[]; models: number[] }> {
  if (lone.length === 0) return { checks: [], models: [] };
  const rows = await db.query<{ job_id: string; model_id: number; request: JobRequest; answer: string; seen: number[] }>(PICK, [lone.map((l) => l.modelId), lone.map((l) => l.nodeId)]);
  return {
    // Queued as a score check of the reference's job is: never to a node that saw the request.
    checks: rows.map((r) => ({ kind: 'verify' as const, id: randomUUID(), of: r.job_id, exclude: r.seen, suspicion: { canary: r.job_id }, request: scoreRequest(r.request, r.answer) })),
    models: rows.map((r) => r.model_id),
  };
}
