// Canaries (issue 31, issue 53; docs/verification.md "Canaries"): a second line behind score
// checks (scores.ts) for a model only one node serves, which no other node can check.
// - References: a temperature-0 answer that a scorer found in line and a second scorer's spot
//   check (VERIFY_SPOT_SHARE) found in line too is kept (migrations/0020_canaries.sql: at most
//   CANARIES_PER_MODEL per model, the newest), with its scorers' confidence per character
//   (referenceGaps; migrations/0031): three parties agree on it, never one scorer's word.
// - Sending: when one node alone serves a model, the maintenance round (probes.ts) now and then
//   sends it a reference's request as an ordinary job: a copy of the reference's job on the
//   worker wire, as the user's job looked (its request whole, temperature 0, its seed; no
//   `params.score`, no capability needed), queued as a check of that job.
// - Judging (scores.ts judgeCanaryAnswers, canaryVerdict): the node's answer against the
//   reference's, at the first character where they part: where the reference's two scorers were
//   sure of the reference's token (top-1 − top-2 gap above CANARY_CONFIDENT), an answer's worth of
//   evidence on the node's test (ANSWER_CAP: the third suspends); at a near tie, nothing; a full
//   match, an agreement (and half an answer's worth off the test). So a canary checks the model the node answers with.
// - A node is never sent a request it saw (as the job's node, a scorer, or an earlier canary's):
//   a second sight of the same request would tell it a canary. So each reference checks each
//   node once, and a lone node gets at most as many canaries as references exist that it never
//   saw; new references need three nodes of the model online.
// - A reference is only as good as the nodes that agreed on it: one whose answering node or
//   either scorer is suspended since is not sent.
import { randomUUID } from 'node:crypto';
import { sql, type Queryable } from '../db/database.js';
import { doneQuantization } from '../db/rules/declared-build.js';
import { nodeSuspended } from '../db/rules/suspended.js';
import { sessionHolds } from '../db/rules/live.js';
import type { Check } from '../jobs/sql/queue-checks.js';
import type { JobRequest } from '../jobs/request.js';
import type { Scores } from '../jobs/answer.js';
import type { WireToken } from '../validation/answer-tokens.js';
import { ANSWER_CAP, MARGIN, TEMPERATURE_FLOOR } from './token-stats.js';

/** References kept per model (the newest). */
export const CANARIES_PER_MODEL = 32;

// $1..$6 parallel: the jobs, their models, requests and answers, the nodes vouching for each
// (array literals: the answering node and the scorer), the nodes that saw each (array literals).
// The quantisation is the one the answering node's session declared when it ran the job.
const REMEMBER = sql(
  'verify_canaries_remember',
  `INSERT INTO canaries (job_id, model_id, quantization, request, answer, vouched, seen, gaps)
  SELECT u.job_id, u.model_id,
    ${doneQuantization('u.job_id', 'u.model_id')},
    u.request, u.answer, u.vouched::bigint[], u.seen::bigint[], u.gaps::jsonb
  FROM unnest($1::uuid[], $2::int[], $3::jsonb[], $4::text[], $5::text[], $6::text[], $7::text[]) AS u(job_id, model_id, request, answer, vouched, seen, gaps)
  ON CONFLICT (job_id) DO NOTHING`,
);
// The models' ($1) references beyond the newest $2.
const FORGET = sql(
  'verify_canaries_forget',
  `DELETE FROM canaries c WHERE c.model_id = ANY($1::int[]) AND c.job_id NOT IN (
  SELECT x.job_id FROM canaries x WHERE x.model_id = c.model_id ORDER BY x.at DESC, x.job_id LIMIT $2::int)`,
);
// For each model $1 and the lone node $2 serving it: one reference that node never saw, whose
// job is still kept (retention) and whose vouching nodes are in good standing — preferably one
// of the node's own declared quantisation, else any — marked as seen by the node.
const PICK = sql(
  'verify_canaries_pick',
  `WITH picked AS (
  SELECT DISTINCT ON (u.model_id) c.job_id, c.model_id, c.request, c.answer, c.gaps, c.seen, u.node_id
  FROM unnest($1::int[], $2::bigint[]) AS u(model_id, node_id)
  JOIN canaries c ON c.model_id = u.model_id AND NOT (u.node_id = ANY(c.seen))
  LEFT JOIN LATERAL (SELECT b.quantization FROM node_sessions s JOIN nodes n ON n.id = s.node_id
      JOIN session_model_builds b ON b.session_id = s.id AND b.model_id = u.model_id
    WHERE s.node_id = u.node_id AND ${sessionHolds('s', 'n')} ORDER BY s.last_seen_at DESC LIMIT 1) q ON true
  WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.id = c.job_id)
    AND NOT EXISTS (SELECT 1 FROM unnest(c.vouched) AS v(node_id) WHERE ${nodeSuspended('v.node_id')})
  ORDER BY u.model_id, (c.quantization IS NOT DISTINCT FROM q.quantization) DESC, random()
),
marked AS (UPDATE canaries c SET seen = c.seen || p.node_id FROM picked p WHERE c.job_id = p.job_id)
SELECT p.job_id::text, p.model_id, p.request, p.answer, p.gaps, p.seen::int[] AS seen FROM picked p`,
);

/** An answer a score check found in line: a reference to keep. */
export interface Reference {
  jobId: string;
  modelId: number;
  request: JobRequest;
  answer: string;
  vouched: number[];
  seen: number[];
  gaps: number[] | null;
}

const literal = (ids: readonly number[]): string => `{${[...new Set(ids)].join(',')}}`;

/** Keeps the references (a batch's last CANARIES_PER_MODEL of each model at most), then only the newest CANARIES_PER_MODEL of their models. */
export async function remember(db: Queryable, refs: readonly Reference[]): Promise<void> {
  const perModel = new Map<number, Reference[]>();
  for (const r of refs) perModel.set(r.modelId, [...(perModel.get(r.modelId) ?? []), r].slice(-CANARIES_PER_MODEL));
  const kept = [...perModel.values()].flat();
  if (kept.length === 0) return;
  await db.query(REMEMBER, [
    kept.map((r) => r.jobId),
    kept.map((r) => r.modelId),
    kept.map((r) => JSON.stringify(r.request)),
    kept.map((r) => r.answer),
    kept.map((r) => literal(r.vouched)),
    kept.map((r) => literal(r.seen)),
    kept.map((r) => (r.gaps ? JSON.stringify(r.gaps.map((g) => Math.round(g * 1000) / 1000)) : null)),
  ]);
  await db.query(FORGET, [[...perModel.keys()], CANARIES_PER_MODEL]);
}

/**
 * The canaries for the lone nodes of these models, to queue with the round's probes: each a
 * stored reference's request sent as an ordinary job (issue 53) — a copy of the reference's job
 * on the worker wire, as users' jobs look (no `params.score`, no `score` needed; temperature 0,
 * its seed) — for models that have one the node never saw. The reference's answer and its
 * confidence per character ride in the check's suspicion (never on the wire) for the judging
 * (scores.ts judgeCanaryAnswers).
 */
export async function canaries(db: Queryable, lone: readonly { modelId: number; nodeId: number }[]): Promise<{ checks: Check[]; models: number[] }> {
  if (lone.length === 0) return { checks: [], models: [] };
  const rows = await db.query<{ job_id: string; model_id: number; request: JobRequest; answer: string; gaps: number[] | null; seen: number[] }>(
    PICK,
    [lone.map((l) => l.modelId), lone.map((l) => l.nodeId)],
  );
  return {
    // Never to a node that saw the request.
    checks: rows.map((r) => ({
      kind: 'verify' as const,
      id: randomUUID(),
      of: r.job_id,
      exclude: r.seen,
      suspicion: { canary: r.job_id, answer: r.answer, gaps: r.gaps },
      request: r.request,
    })),
    models: rows.map((r) => r.model_id),
  };
}

/** Above this top-1 − top-2 gap (nats) at a position, the reference's scorers were sure of its token there: the same bound as a confident mismatch at temperature 0 (token-stats.ts). */
export const CANARY_CONFIDENT = MARGIN * TEMPERATURE_FLOOR;

/**
 * A canary's answer against its reference's: where the two texts first part, and how sure the
 * reference's scorers were of the reference's token there (`gaps`, per character). A full
 * match (or one text a beginning of the other: a length cut) agrees; parting where the
 * reference's model was sure is evidence (an answer's worth, ANSWER_CAP) that the node runs
 * another model; parting at a near tie, or where the reference's confidence is unknown, says
 * nothing; a match takes half an answer's worth off (the test is floored at 0), so that rare
 * unlucky partings of an honest node do not add up over months.
 */
export function canaryVerdict(
  answer: string,
  reference: string,
  gaps: readonly number[] | null,
): { agree: boolean; evidence: number; at: number | null; gap: number | null } {
  const n = Math.min(answer.length, reference.length);
  let k = 0;
  while (k < n && answer[k] === reference[k]) k++;
  if (k === n && (answer.length > 0 || reference.length === 0)) return { agree: true, evidence: -ANSWER_CAP / 2, at: null, gap: null };
  const gap = gaps?.[k] ?? null;
  return { agree: false, evidence: gap !== null && gap > CANARY_CONFIDENT ? ANSWER_CAP : 0, at: k, gap };
}

/**
 * A reference's confidence per character of its answer: at each character, the smaller of its
 * two scorers' top-1 − top-2 gaps at the token that holds it (0 where the answer's token was not
 * a scorer's top-1). The tokens are the node's as it reported them (`params.score.tokens`), or
 * one per character where the scores have one position per character; otherwise unknown (null).
 */
export function referenceGaps(answer: string, tokens: readonly WireToken[] | undefined, a: Scores, b: Scores): number[] | null {
  const n = Math.min(a.rank.length, b.rank.length);
  const confidence = (i: number) => Math.min(a.rank[i] === 1 ? a.gap[i]! : 0, b.rank[i] === 1 ? b.gap[i]! : 0);
  let lengths: number[];
  if (tokens?.every((t) => typeof t === 'string')) lengths = tokens.map((t) => t.length);
  else if (a.rank.length === answer.length && b.rank.length === answer.length) lengths = Array<number>(answer.length).fill(1);
  else return null;
  if (lengths.length > n) return null;
  const out: number[] = [];
  lengths.forEach((len, i) => {
    for (let j = 0; j < len; j++) out.push(confidence(i));
  });
  return out.length === answer.length ? out : null;
}
