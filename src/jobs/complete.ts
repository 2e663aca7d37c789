// Completing leased jobs: a worker's report with the job key (jk_) of its lease. Concurrent
// reports share one statement (db/batcher.ts) that ends the leases, finishes or requeues the
// jobs, and credits the successes through the service's one credit statement
// (results/credit.ts), all in one commit. A report the statement cannot match (its lease
// ended, the deadline passed, a repeat) is explained by explainReport: a repeat of the
// worker's own report is a replay, anything else is refused and credits nothing.
import { sql, type Database, type Queryable } from '../db/database.js';
import { Batcher } from '../db/batcher.js';
import { creditStatement } from '../results/credit.js';
import { JOBS_CHANNEL, RESULTS_CHANNEL } from './channels.js';
import type { Answer, Usage } from './answer.js';
import type { JobState } from './states.js';
import type { DoneJob } from './watch.js';

export interface JobReport {
  keyHash: string;
  jobId: string;
  modelName: string;
  status: 'success' | 'error';
  /** The result as the worker sent it (kept in job_results) and as the user reads it. */
  result: Record<string, unknown>;
  answer: Answer;
  usage: Usage | null;
}

export type Completion =
  | { kind: 'completed'; status: 'success' | 'error'; points: number; state: JobState; modelId: number; nodeId: number }
  | { kind: 'replayed'; status: 'success' | 'error' }
  | { kind: 'refused'; detail: string };

// $1..$7 the reports: job key hashes, job ids, model names, statuses, results, answers,
// usages; $8 the default points of a success; $9 MAX_ATTEMPTS; $10 this server's id; $11
// whether done jobs wait for the auditor (job_audits, src/verify/; not while VERIFY=off). A
// report matches when its lease is open, for that job and model, before the job's deadline;
// the lease row is the gate (whoever ends it first wins; the sweeper ends leases too).
const COMPLETE = creditStatement('jobs_complete', {
  with: `reports AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::jsonb[], $7::jsonb[])
    AS q(key_hash, job_id, model_name, status, result, answer, usage)
),
-- A suspended node's answer is not taken (src/verify/standing.ts): its lease ends as an error
-- and the job goes back to the queue for another node.
ended AS (
  UPDATE job_leases l SET ended_at = now(), outcome = CASE WHEN q.status = 'success'
      AND NOT EXISTS (SELECT 1 FROM node_standing r WHERE r.node_id = l.node_id AND r.state = 'suspended') THEN 'done' ELSE 'error' END
  FROM reports q, jobs j, models m
  WHERE l.key_hash = q.key_hash AND l.ended_at IS NULL AND l.job_id::text = q.job_id
    AND j.id = l.job_id AND j.state = 'leased' AND j.deadline_at > now()
    AND m.id = j.model_id AND m.name = q.model_name
  RETURNING l.key_hash, l.job_id, l.node_id, j.model_id, CASE l.outcome WHEN 'done' THEN 'success' ELSE 'error' END AS status, q.result, q.answer, q.usage
),
finished AS (
  UPDATE jobs j SET
    state = CASE WHEN e.status = 'success' THEN 'done' WHEN j.attempts >= $9::int THEN 'failed' ELSE 'queued' END,
    result = CASE WHEN e.status = 'success' THEN e.answer END,
    usage = CASE WHEN e.status = 'success' THEN e.usage END,
    node_id = CASE WHEN e.status = 'success' THEN e.node_id END,
    lease_expires_at = NULL,
    finished_at = CASE WHEN e.status = 'success' OR j.attempts >= $9::int THEN now() END,
    detail = CASE WHEN e.status = 'error' AND j.attempts >= $9::int THEN 'no node finished it in ' || $9::int || ' attempts' END
  FROM ended e WHERE j.id = e.job_id
  RETURNING j.id, j.state, j.model_id, extract(epoch FROM j.first_leased_at - j.submitted_at)::float8 AS queued_seconds
),
audits AS (INSERT INTO job_audits (job_id, finished_at) SELECT id, now() FROM finished WHERE state = 'done' AND $11::boolean),
queued AS (SELECT string_agg(model_id || ':' || n, ',') AS items FROM (SELECT model_id, count(*) AS n FROM finished WHERE state = 'queued' GROUP BY model_id) c),
final AS (SELECT string_agg(id::text, ',') AS items FROM finished WHERE state <> 'queued'),
told AS (
  SELECT pg_notify('${JOBS_CHANNEL}', $10::text || ' ' || items) FROM queued WHERE items IS NOT NULL
  UNION ALL
  SELECT pg_notify('${RESULTS_CHANNEL}', $10::text || ' ' || items) FROM final WHERE items IS NOT NULL)`,
  input: `
  SELECT e.job_id::text AS job_id, e.node_id, e.model_id, 'success'::text AS status, e.result,
    coalesce(m.points_per_job, $8::numeric) AS points, now() AS received_at, false AS explicit
  FROM ended e JOIN models m ON m.id = e.model_id WHERE e.status = 'success'`,
  output: `SELECT e.key_hash, e.status, coalesce(c.points, 0)::float8 AS points, f.state, f.model_id, e.node_id::int AS node_id, f.queued_seconds,
    (SELECT count(*)::int FROM told) AS told
  FROM ended e JOIN finished f ON f.id = e.job_id LEFT JOIN credited c ON c.job_id = e.job_id::text`,
});

// Why a report did not match: $1 the job key's hash, $2 the reported result.
const EXPLAIN = sql('jobs_explain_report', `SELECT l.job_id::text AS job_id, l.ended_at IS NOT NULL AS ended, l.outcome,
    j.state, j.deadline_at <= now() AS past_deadline, m.name AS model, r.result = $2::jsonb AS same_result
  FROM job_leases l JOIN jobs j ON j.id = l.job_id JOIN models m ON m.id = j.model_id
  LEFT JOIN job_results r ON r.job_id = l.job_id::text AND r.node_id = l.node_id
  WHERE l.key_hash = $1::text`);

// A node-key report of a job id: the lease of this node for it, newest first ($1 job id, $2
// node id). No row: no such dispatched job; a row without key_hash: never leased to this node.
const NODE_LEASE = sql('jobs_node_lease', `SELECT l.key_hash FROM jobs j
  LEFT JOIN job_leases l ON l.job_id = j.id AND l.node_id = $2::bigint
  WHERE j.id = $1::uuid ORDER BY l.attempt DESC NULLS LAST LIMIT 1`);

interface Row { key_hash: string; status: 'success' | 'error'; points: number; state: JobState; model_id: number; node_id: number; queued_seconds: number }
interface Explained { job_id: string; ended: boolean; outcome: string | null; state: JobState; past_deadline: boolean; model: string; same_result: boolean | null }

const ENDED: Record<string, string> = {
  expired: 'its lease expired and the job went back to the queue',
  deadline: "the job's deadline passed",
  released: 'the lease was given back (the node deregistered)',
  abandoned: 'the lease was given up (the worker asked for another job)',
  error: 'this lease already ended with an error report',
  done: 'this lease already ended with a different report',
};

export async function explainReport(db: Queryable, r: JobReport): Promise<Completion | 'retry'> {
  const [e] = await db.query<Explained>(EXPLAIN, [r.keyHash, JSON.stringify(r.result)]);
  if (!e) return { kind: 'refused', detail: 'Unknown job key' };
  if (e.job_id !== r.jobId) return { kind: 'refused', detail: `This job key is for job ${e.job_id}, not ${r.jobId}` };
  if (e.model !== r.modelName) return { kind: 'refused', detail: `Job ${r.jobId} is for model ${e.model}, not ${r.modelName}` };
  if (e.outcome === 'done' && r.status === 'success' && e.same_result) return { kind: 'replayed', status: 'success' };
  if (e.outcome === 'error' && r.status === 'error') return { kind: 'replayed', status: 'error' };
  if (e.ended) return { kind: 'refused', detail: `Job ${r.jobId}: ${ENDED[e.outcome ?? ''] ?? 'this lease has ended'}; nothing was credited` };
  if (e.past_deadline || e.state !== 'leased') return { kind: 'refused', detail: `Job ${r.jobId}: ${ENDED.deadline}; nothing was credited` };
  // The lease is open: a concurrent report of it had not committed yet when this one looked.
  return 'retry';
}

/** The key hash of this node's newest lease of a dispatched job; null: the job is dispatched but never was this node's; undefined: no such job. */
export async function nodeLeaseOf(db: Queryable, jobId: string, nodeId: number): Promise<string | null | undefined> {
  const [row] = await db.query<{ key_hash: string | null }>(NODE_LEASE, [jobId, nodeId]);
  return row ? row.key_hash : undefined;
}

/** audit: done jobs wait for the auditor (src/verify/); false while verification is off, so they never will. */
export interface CompleterOptions { defaultPoints: number; maxAttempts: number; server: string; audit: boolean }

/** Jobs queued again (per model), jobs that reached a final state (with the answers of those done), and the jobs whose lease this batch ended. */
export type OnCompleted = (queued: Map<number, number>, finished: string[], done: Map<string, DoneJob>, leasesEnded: string[]) => void;

export class Completer {
  private readonly batcher: Batcher<JobReport, Row | undefined>;

  constructor(private readonly db: Database, private readonly opts: CompleterOptions, onCompleted: OnCompleted) {
    this.batcher = new Batcher(async (reports) => {
      // One statement takes each lease once: a repeat in the same batch is explained afterwards.
      const first = new Map<string, JobReport>();
      for (const r of reports) if (!first.has(r.keyHash)) first.set(r.keyHash, r);
      const batch = [...first.values()];
      const rows = await db.query<Row>(COMPLETE, [
        batch.map((r) => r.keyHash), batch.map((r) => r.jobId), batch.map((r) => r.modelName), batch.map((r) => r.status),
        batch.map((r) => JSON.stringify(r.result)), batch.map((r) => JSON.stringify(r.answer)), batch.map((r) => (r.usage ? JSON.stringify(r.usage) : null)),
        opts.defaultPoints, opts.maxAttempts, opts.server, opts.audit,
      ]);
      const byKey = new Map(rows.map((row) => [row.key_hash, row]));
      const queued = new Map<number, number>();
      const finished: string[] = [];
      const done = new Map<string, DoneJob>();
      for (const r of batch) {
        const row = byKey.get(r.keyHash);
        if (!row) continue;
        if (row.state === 'queued') queued.set(row.model_id, (queued.get(row.model_id) ?? 0) + 1);
        else finished.push(r.jobId);
        if (row.state === 'done') done.set(r.jobId, { state: 'done', result: r.answer, usage: r.usage, queuedSeconds: row.queued_seconds });
      }
      onCompleted(queued, finished, done, batch.filter((r) => byKey.has(r.keyHash)).map((r) => r.jobId));
      return reports.map((r) => (first.get(r.keyHash) === r ? byKey.get(r.keyHash) : undefined));
    }, { maxBatch: 128, maxInFlight: 2 });
  }

  async complete(r: JobReport): Promise<Completion> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const row = await this.batcher.load(r);
      if (row) return { kind: 'completed', status: row.status, points: row.points, state: row.state, modelId: row.model_id, nodeId: row.node_id };
      const explained = await explainReport(this.db, r);
      if (explained !== 'retry') return explained;
    }
    return { kind: 'refused', detail: `Job ${r.jobId} is being reported concurrently; nothing was credited by this call` };
  }
}
