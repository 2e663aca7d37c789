// Transition: complete (leased → done, or → queued|failed on an error report) — a worker's
// report with the job key (jk_) of its lease. Concurrent reports share this statement
// (jobs/complete.ts batches them); it ends the leases, finishes or requeues the jobs, queues the
// done ones for the auditor, and credits the successes (the credit part every credit statement
// shares, results/credit.ts), all in one commit. The lease is the gate: it must be open, for
// that job and model, before the job's deadline, and held by a node that is enabled —
// whoever ends a lease first (a report, the sweep, a release, a cancel) wins.
import { sql, type Queryable } from '../../db/database.js';
import { CREDIT_PART } from '../../results/credit.js';
import { nodeSuspended } from '../../db/rules/suspended.js';
import { parseItems, type DoneJob, type Outcome } from '../outcome.js';
import {
  estimateAnswerTokens,
  mostCompletionTokens,
  OTHER_REQUEST_ERROR,
  REQUEST_ERROR_MESSAGES,
  type Answer,
  type RequestError,
  type Usage,
} from '../answer.js';
import type { JobState } from '../states.js';
import type { WireToken } from '../../validation/answer-tokens.js';
import { coversSql } from '../context.js';
import { requeueOrFail } from './requeue.js';

// $1 the reports, one JSON array (completeJobs below writes it; each report's fields are those of
// `reports`, named by the comments below): key_hash, job_id, model_name, status, result (as
// sent, kept in job_results), answer (what the owner reads), usage, request_error, estimate,
// most, tokens. $2 the default points of a success; $3 MAX_ATTEMPTS; $4 this server's id; $5
// whether done jobs wait for the auditor (job_audits, src/verify/; not while VERIFY=off). A suspended node's answer is not taken
// (src/verify/standing.ts): its lease ends as an error and the job goes back to the queue for
// another node.
//
// An error report is the node's fault, as a lease that ran out is (sql/sweep.ts): its job is
// requeued or failed by the one rule of both (sql/requeue.ts). The node's id comes back so that
// repeated failures count against it (verify/failures.ts).
//
// Usage: a done job's usage is its finishing lease's own report — plus, for a continued job,
// the reports of the earlier leases whose streamed text is the kept prefix (each at most one
// token per byte it streamed; the finishing lease, of a job with an owner, at most `most`: a token
// per byte of its answer and an allowance, jobs/answer.ts mostCompletionTokens) — with
// completion_tokens clamped at the job's reservation (its
// max_output, or the reserve of a job that set none: reserved_tokens, sql/submit.ts; at least 1,
// QUOTA_RESERVE_TOKENS in config.ts; an embeddings job's is 0: it generates none). Copies and
// probes reserve nothing and are no one's to charge: theirs stays the node's own count,
// unclamped. Other
// error reports' usage is never charged. `estimate`, the answer's estimated output tokens
// (jobs/answer.ts estimateAnswerTokens): a success whose finishing report counts no
// completion_tokens (the seed's workers count none) is charged that estimate, clamped as a count
// would be, rather than its whole reservation, and its prompt, unless counted, is estimated from
// its messages' text likewise; the usage says `estimated: true`. The lease keeps the report as sent, which
// verification reads (src/verify/auditor.ts). A count cut down to the answer's bytes that reached
// max_output still says the node stopped there: an answer with no finish_reason of its own gets
// "length" (`cut`), as /v1 would have inferred from the count (routes/openai/completion.ts). A counted prompt_tokens is shown to the owner and
// charged nowhere, but a node may not claim more than its request could hold: at most one token
// per byte of the request as stored, plus PROMPT_ALLOWANCE for what the backend adds (its chat
// template, a Modelfile's system prompt). Before, a node's 2,000,000,000 reached the client.
// `request_error` (issue 28), the request's own error the worker claims (jobs/answer.ts
// requestErrorOf; NULL: none): such a job fails at once with that error kept (jobs.error, /v1
// answers 400 with it) — no retry on another node, which would only fail the same way — and its
// lease ends as 'request_error' (no failure of the node: it is counted per node instead, since a
// hostile node could claim it to fail jobs; docs/openai.md). The job's detail, which its user
// reads, is a fixed message by the error's code (jobs/answer.ts REQUEST_ERROR_MESSAGES, issue 53):
// the node's own words stay in jobs.error, for the operator. Verification audits the claim
// (verify/request-errors.ts): the statement tells which jobs, not copies, ended so, and whether
// the refusing session's declared context held the request (issue 53, jobs/context.ts
// coversSql: only such a claim is audited; a node that declared nothing, or less than the
// request's upper bound, may have refused it honestly).
// `tokens` (issue 53), the answer's tokens as the node reported them (checked by the route:
// src/validation/answer-tokens.ts; NULL: none), kept in jobs.tokens for score checks only.
// $6 (issue 55) VERIFY_CHECK_PRICE: a score check earns the model's points per job × $6 × its
// share of the answer's tokens it scored (check_share below), credited once like any success and
// kept apart as a check (job_results.is_check, node_daily_points.check_points).
/** A constant of this file as an SQL string literal (never input). */
const literal = (text: string): string => `'${text.replace(/'/g, "''")}'`;
/** The CASE arms giving a request error's fixed message by its code (jobs/answer.ts publicRequestError). */
const REQUEST_ERROR_DETAIL = `${Object.entries(REQUEST_ERROR_MESSAGES)
  .map(([code, m]) => `WHEN ${literal(code)} THEN ${literal(m)}`)
  .join(' ')} ELSE ${literal(OTHER_REQUEST_ERROR)}`;

/** Prompt tokens a node may count beyond one per byte of the request (its backend's chat template and system prompt). */
export const PROMPT_ALLOWANCE = 4096;

export const COMPLETE = sql(
  'jobs_complete',
  `WITH reports AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS q(key_hash text, job_id text, model_name text, status text, result jsonb, answer jsonb,
    usage jsonb, request_error jsonb, estimate bigint, most bigint, tokens jsonb)
),
ended AS (
  UPDATE job_leases l SET ended_at = now(), usage = q.usage, outcome = CASE
      WHEN ${nodeSuspended('l.node_id')} THEN 'error'
      WHEN q.status = 'success' THEN 'done' WHEN q.request_error IS NOT NULL THEN 'request_error' ELSE 'error' END
  FROM reports q, jobs j, models m, nodes n
  WHERE l.key_hash = q.key_hash AND l.ended_at IS NULL AND l.job_id::text = q.job_id
    AND j.id = l.job_id AND j.state = 'leased' AND j.deadline_at > now()
    AND m.id = j.model_id AND m.name = q.model_name
    AND n.id = l.node_id AND n.disabled_at IS NULL
  RETURNING l.key_hash, l.job_id, l.node_id, l.attempt, l.prefix, l.prefix || l.partial AS streamed, j.model_id,
    CASE l.outcome WHEN 'done' THEN 'success' ELSE 'error' END AS status, q.result, q.answer, q.usage,
    coalesce(q.usage ? 'completion_tokens', false) AS counted, (q.usage ->> 'completion_tokens')::bigint AS reported, q.estimate, q.most,
    CASE l.outcome WHEN 'request_error' THEN q.request_error END AS request_error,
    CASE l.outcome WHEN 'request_error' THEN coalesce((SELECT ${coversSql('s.model_contexts[array_position(s.models, j.model_id)]', 'j')}
      FROM node_sessions s WHERE s.id = l.session_id), false) END AS covered, q.tokens,
    -- Issue 55: a score check's share of a generated answer's points (docs/verification.md,
    -- "Checks priced by their work"): its positions scored over the answer's tokens (those the
    -- answer's node reported, else what the scorer scored and left unscored), at most 1, at $6
    -- (VERIFY_CHECK_PRICE) for a prefill; a replay (Ollama) generates, and is priced as generating.
    CASE WHEN j.request -> 'params' -> 'score' IS NOT NULL THEN
      CASE WHEN q.result -> 'scores' ->> 'method' = 'replay' THEN 1 ELSE $6::numeric END
      * least(1, coalesce(jsonb_array_length(CASE jsonb_typeof(q.result -> 'scores' -> 'rank') WHEN 'array' THEN q.result -> 'scores' -> 'rank' END), 0)::numeric
        / greatest(1, coalesce(jsonb_array_length(CASE jsonb_typeof(j.request -> 'params' -> 'score' -> 'tokens') WHEN 'array' THEN j.request -> 'params' -> 'score' -> 'tokens' END),
          coalesce(jsonb_array_length(CASE jsonb_typeof(q.result -> 'scores' -> 'rank') WHEN 'array' THEN q.result -> 'scores' -> 'rank' END), 0)
          + CASE WHEN jsonb_typeof(q.result -> 'scores' -> 'unscored') = 'number' THEN least(greatest((q.result -> 'scores' ->> 'unscored')::numeric, 0), 1e9) ELSE 0 END)))
    END AS check_share
),
usages AS (
  SELECT e.job_id, nullif(jsonb_strip_nulls(jsonb_build_object(
      'prompt_tokens', CASE WHEN sum(u.prompt) IS NOT NULL THEN least(sum(u.prompt), octet_length(j.request::text) + ${PROMPT_ALLOWANCE}) WHEN e.counted THEN NULL ELSE (SELECT ceil(sum(octet_length(m ->> 'content')) / 4.0)::bigint
        FROM jsonb_array_elements(CASE jsonb_typeof(j.request -> 'messages') WHEN 'array' THEN j.request -> 'messages' END) m) END,
      'completion_tokens', least(CASE WHEN e.counted THEN sum(u.completion) ELSE e.estimate END,
        CASE WHEN j.owner_key_id IS NOT NULL THEN greatest(j.reserved_tokens, coalesce((j.request ->> 'max_output')::bigint, 0)) END),
      'estimated', CASE WHEN NOT e.counted THEN true END)), '{}') AS usage,
    bool_or(u.cut) AS cut
  FROM ended e JOIN jobs j ON j.id = e.job_id CROSS JOIN LATERAL (
    SELECT (e.usage ->> 'prompt_tokens')::bigint AS prompt,
      CASE WHEN j.owner_key_id IS NOT NULL THEN least(e.reported, e.most) ELSE e.reported END AS completion,
      j.owner_key_id IS NOT NULL AND e.reported > e.most AND e.reported >= nullif((j.request ->> 'max_output')::bigint, 0)
        AND NOT e.answer ? 'finish_reason' AS cut
    UNION ALL
    SELECT (p.usage ->> 'prompt_tokens')::bigint, least((p.usage ->> 'completion_tokens')::bigint, octet_length(p.partial)), false
    FROM job_leases p WHERE e.prefix <> '' AND p.job_id = e.job_id AND p.attempt < e.attempt AND p.partial <> '' AND p.usage IS NOT NULL) u
  WHERE e.status = 'success' GROUP BY e.job_id, e.counted, e.estimate, j.reserved_tokens, j.request, j.owner_key_id
),
-- A success, or the request's own error (failed at once); a plain error report is a failed attempt: requeued.
finished AS (
  UPDATE jobs j SET
    state = CASE WHEN e.status = 'success' THEN 'done' ELSE 'failed' END,
    failures = j.failures + CASE WHEN e.status = 'error' THEN 1 ELSE 0 END,
    exclude_nodes = CASE WHEN e.status = 'error' AND NOT (e.node_id = ANY(j.exclude_nodes)) THEN j.exclude_nodes || e.node_id ELSE j.exclude_nodes END,
    result = CASE WHEN e.status = 'success' THEN CASE WHEN u.cut THEN e.answer || '{"finish_reason": "length"}'::jsonb ELSE e.answer END END,
    usage = u.usage,
    node_id = CASE WHEN e.status = 'success' THEN e.node_id END,
    streamed = '', lease_expires_at = NULL, finished_at = now(),
    detail = CASE WHEN e.request_error IS NOT NULL THEN CASE e.request_error ->> 'code' ${REQUEST_ERROR_DETAIL} END END,
    error = e.request_error,
    tokens = CASE WHEN e.status = 'success' THEN e.tokens END
  FROM ended e LEFT JOIN usages u ON u.job_id = e.job_id
  WHERE j.id = e.job_id AND (e.status = 'success' OR e.request_error IS NOT NULL)
  RETURNING j.id, j.state, j.model_id, j.verify_of, j.usage, j.delivery, coalesce(u.cut, false) AS cut, e.attempt, extract(epoch FROM j.first_leased_at - j.submitted_at)::float8 AS queued_seconds,
    -- A job done after other nodes failed it: their failures are now shown to be theirs (verify/failures.ts).
    CASE WHEN j.state = 'done' AND j.failures > 0 THEN ARRAY(SELECT DISTINCT l.node_id::int FROM job_leases l
      WHERE l.job_id = j.id AND l.outcome IN ('error', 'expired') AND l.node_id <> e.node_id) END AS failed_by
),
${requeueOrFail('ended', "e.status = 'error' AND e.request_error IS NULL", '$3::int')},
settled AS (
  SELECT id, state, model_id, verify_of, usage, delivery, cut, attempt, queued_seconds, failed_by FROM finished
  UNION ALL SELECT id, state, model_id, verify_of, NULL, NULL, false, attempt, NULL, NULL FROM requeued
),
-- The owner's daily usage (key_usage) is not touched here: the settler (src/usage/sql.ts) folds a
-- finished job's usage, as this statement leaves it in jobs.usage, into the owner's counters
-- within about a second (issue 30: the owner's hot row left this statement).
announced AS (
  SELECT jobs_announce($4::text,
    ARRAY(SELECT model_id FROM settled WHERE state = 'queued' AND verify_of IS NULL), ARRAY(SELECT model_id FROM settled WHERE state = 'queued' AND verify_of IS NOT NULL),
    ARRAY(SELECT id FROM settled WHERE state <> 'queued'), ARRAY(SELECT state FROM settled WHERE state <> 'queued'), ARRAY(SELECT model_id FROM settled WHERE state <> 'queued'),
    ARRAY(SELECT id FROM settled WHERE state = 'queued'), ARRAY(SELECT attempt FROM settled WHERE state = 'queued')) AS items
),
audits AS (INSERT INTO job_audits (job_id, finished_at) SELECT id, now() FROM settled WHERE state = 'done' AND $5::boolean),
input AS (
  SELECT e.job_id::text AS job_id, e.node_id, e.model_id, 'success'::text AS status, e.result,
    CASE WHEN e.check_share IS NULL THEN coalesce(m.points_per_job, $2::numeric) ELSE round(coalesce(m.points_per_job, $2::numeric) * e.check_share, 6) END AS points,
    now() AS received_at, false AS explicit, e.check_share IS NOT NULL AS is_check
  FROM ended e JOIN models m ON m.id = e.model_id WHERE e.status = 'success'
),
${CREDIT_PART}SELECT e.key_hash, e.status, coalesce(c.points, 0)::float8 AS points, f.state, f.model_id, e.node_id::int AS node_id, f.queued_seconds, f.usage, f.cut,
  e.request_error IS NOT NULL AS request_error, coalesce(e.covered, false) AS covered, f.verify_of IS NOT NULL AS copy, f.failed_by,
  f.delivery IS NOT NULL AS held, a.items AS announced
FROM ended e JOIN settled f ON f.id = e.job_id LEFT JOIN credited c ON c.job_id = e.job_id::text CROSS JOIN announced a`,
);

export interface JobReport {
  keyHash: string;
  jobId: string;
  modelName: string;
  status: 'success' | 'error';
  /** The result as the worker sent it (kept in job_results) and as the user reads it. */
  result: Record<string, unknown>;
  answer: Answer;
  usage: Usage | null;
  /** The request's own error the worker claims (an error report): the job fails at once with it. */
  requestError?: RequestError;
  /** Issue 53: the answer's tokens as the node generated them (checked against its text), for score checks. */
  tokens?: WireToken[];
}

/** A report the statement took: its lease ended, and how. */
export interface Completed {
  status: 'success' | 'error';
  points: number;
  state: JobState;
  modelId: number;
  nodeId: number;
}

interface Row {
  key_hash: string;
  status: 'success' | 'error';
  points: number;
  state: JobState;
  model_id: number;
  node_id: number;
  queued_seconds: number | null;
  usage: Usage | null;
  cut: boolean;
  request_error: boolean;
  covered: boolean;
  copy: boolean;
  failed_by: number[] | null;
  held: boolean;
  announced: string;
}

export interface CompleteOptions {
  defaultPoints: number;
  /** VERIFY_CHECK_PRICE ($6). */
  checkPrice: number;
  maxAttempts: number;
  server: string;
  audit: boolean;
}

/** Completes the reports (each lease once: callers de-duplicate); answers those the statement took, by job key hash, and the outcome. */
export async function completeJobs(
  db: Queryable,
  reports: readonly JobReport[],
  o: CompleteOptions,
): Promise<{ completed: Map<string, Completed>; outcome: Outcome }> {
  const batch = reports.map((r) => ({
    key_hash: r.keyHash,
    job_id: r.jobId,
    model_name: r.modelName,
    status: r.status,
    result: r.result,
    answer: r.answer,
    usage: r.usage,
    request_error: r.requestError ?? null,
    estimate: r.status === 'success' && r.usage?.completion_tokens === undefined ? estimateAnswerTokens(r.answer) : 0,
    most: mostCompletionTokens(r.answer),
    tokens: r.tokens ?? null,
  }));
  const rows = await db.query<Row>(COMPLETE, [JSON.stringify(batch), o.defaultPoints, o.maxAttempts, o.server, o.audit, o.checkPrice]);
  const outcome = parseItems(rows[0]?.announced ?? '');
  const byKey = new Map(reports.map((r) => [r.keyHash, r]));
  const completed = new Map<string, Completed>();
  const done = new Map<string, DoneJob>();
  for (const row of rows) {
    completed.set(row.key_hash, { status: row.status, points: row.points, state: row.state, modelId: row.model_id, nodeId: row.node_id });
    const r = byKey.get(row.key_hash)!;
    // Its count reached max_output beyond what it wrote (cut): the statement said so in the answer, as here.
    // A held answer (checked delivery, jobs/states.ts) is not at hand for its waiters: they read its delivery.
    if (row.state === 'done' && !row.held)
      done.set(r.jobId, {
        state: 'done',
        result: row.cut ? { ...r.answer, finish_reason: 'length' } : r.answer,
        usage: row.usage,
        queuedSeconds: row.queued_seconds,
        nodeId: row.node_id,
      });
  }
  // Error reports are their nodes' failures (a request's own error, issue 28, is the request's),
  // which count against a node once another node finished the job (verify/failures.ts): told
  // when the failure happens and when that job is done.
  const failures = [
    ...rows
      .filter((row) => row.status === 'error' && !row.request_error)
      .map((row) => ({ nodeId: row.node_id, jobId: byKey.get(row.key_hash)!.jobId })),
    ...rows.flatMap((row) => (row.failed_by ?? []).map((nodeId) => ({ nodeId: Number(nodeId), jobId: byKey.get(row.key_hash)!.jobId }))),
  ];
  // The claim is audited (verify/request-errors.ts) when the node's declared context held the
  // request; a copy's own request error is that audit's answer, not audited again.
  const requestErrors = rows
    .filter((row) => row.request_error && row.covered && !row.copy)
    .map((row) => ({ nodeId: row.node_id, jobId: byKey.get(row.key_hash)!.jobId }));
  if (done.size > 0 || failures.length > 0 || requestErrors.length > 0) {
    outcome.local = {
      ...(done.size > 0 ? { done } : {}),
      ...(failures.length > 0 ? { nodeFailures: failures } : {}),
      ...(requestErrors.length > 0 ? { requestErrors } : {}),
    };
  }
  return { completed, outcome };
}
