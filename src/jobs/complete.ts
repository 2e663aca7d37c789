// Completing leased jobs: a worker's report with the job key (jk_) of its lease. Concurrent
// reports share one statement (db/batcher.ts; the transition sql/complete.ts). A report the
// statement cannot match (its lease ended, the deadline passed, a repeat) is explained by
// explainReport: a repeat of the worker's own report is a replay, anything else is refused and
// credits nothing.
import { sql, type Database, type Queryable } from '../db/database.js';
import { Batcher } from '../db/batcher.js';
import type { Lifecycle } from './lifecycle.js';
import type { Completed, JobReport } from './sql/complete.js';
import type { JobState } from './states.js';

export type { JobReport } from './sql/complete.js';

export type Completion =
  | ({ kind: 'completed' } & Completed)
  | { kind: 'replayed'; status: 'success' | 'error' }
  | { kind: 'refused'; detail: string };

// Why a report did not match: $1 the job key's hash, $2 the reported result (compared with its
// hash once retention pruned the body, results/recorder.ts). Once retention deleted the lease,
// its key is unknown: refused, nothing credited.
const EXPLAIN = sql(
  'jobs_explain_report',
  `SELECT l.job_id::text AS job_id, l.ended_at IS NOT NULL AS ended, l.outcome,
    j.state, j.deadline_at <= now() AS past_deadline, m.name AS model,
    CASE WHEN r.result = 'null'::jsonb THEN r.result_hash = sha256(convert_to($2::jsonb::text, 'UTF8')) ELSE r.result = $2::jsonb END AS same_result, n.disabled_at IS NOT NULL AS disabled
  FROM job_leases l JOIN jobs j ON j.id = l.job_id JOIN models m ON m.id = j.model_id JOIN nodes n ON n.id = l.node_id
  LEFT JOIN job_results r ON r.job_id = l.job_id::text AND r.node_id = l.node_id
  WHERE l.key_hash = $1::text`,
);

// A node-key report of a job id: the lease of this node for it, newest first ($1 job id, $2
// node id). No row: no such dispatched job; a row without key_hash: never leased to this node.
const NODE_LEASE = sql(
  'jobs_node_lease',
  `SELECT l.key_hash FROM jobs j
  LEFT JOIN job_leases l ON l.job_id = j.id AND l.node_id = $2::bigint
  WHERE j.id = $1::uuid ORDER BY l.attempt DESC NULLS LAST LIMIT 1`,
);

interface Explained {
  job_id: string;
  ended: boolean;
  outcome: string | null;
  state: JobState;
  past_deadline: boolean;
  model: string;
  same_result: boolean | null;
  disabled: boolean;
}

const ENDED: Record<string, string> = {
  expired: 'its lease expired and the job went back to the queue',
  deadline: "the job's deadline passed",
  released: 'the lease was given back (the node deregistered, was disabled or had its key rotated, or the job never reached it)',
  abandoned: 'the lease was given up (the worker asked for another job)',
  canceled: 'the job was canceled',
  error: 'this lease already ended with an error report',
  request_error: 'this lease already ended with an error report',
  done: 'this lease already ended with a different report',
};

export async function explainReport(db: Queryable, r: JobReport): Promise<Completion | 'retry'> {
  const [e] = await db.query<Explained>(EXPLAIN, [r.keyHash, JSON.stringify(r.result)]);
  if (!e) return { kind: 'refused', detail: 'Unknown job key' };
  if (e.job_id !== r.jobId) return { kind: 'refused', detail: `This job key is for job ${e.job_id}, not ${r.jobId}` };
  if (e.model !== r.modelName) return { kind: 'refused', detail: `Job ${r.jobId} is for model ${e.model}, not ${r.modelName}` };
  if (e.outcome === 'done' && r.status === 'success' && e.same_result) return { kind: 'replayed', status: 'success' };
  if ((e.outcome === 'error' || e.outcome === 'request_error') && r.status === 'error') return { kind: 'replayed', status: 'error' };
  if (e.ended) return { kind: 'refused', detail: `Job ${r.jobId}: ${ENDED[e.outcome ?? ''] ?? 'this lease has ended'}; nothing was credited` };
  if (e.disabled) return { kind: 'refused', detail: `Job ${r.jobId}: the node is disabled; nothing was credited` };
  if (e.past_deadline || e.state !== 'leased') return { kind: 'refused', detail: `Job ${r.jobId}: ${ENDED.deadline}; nothing was credited` };
  // The lease is open: a concurrent report of it had not committed yet when this one looked.
  return 'retry';
}

/** The key hash of this node's newest lease of a dispatched job; null: the job is dispatched but never was this node's; undefined: no such job. */
export async function nodeLeaseOf(db: Queryable, jobId: string, nodeId: number): Promise<string | null | undefined> {
  const [row] = await db.query<{ key_hash: string | null }>(NODE_LEASE, [jobId, nodeId]);
  return row ? row.key_hash : undefined;
}

export class Completer {
  private readonly batcher: Batcher<JobReport, Completed | undefined>;

  constructor(
    private readonly db: Database,
    lifecycle: Lifecycle,
  ) {
    this.batcher = new Batcher(
      async (reports) => {
        // One statement takes each lease once: a repeat in the same batch is explained afterwards.
        const first = new Map<string, JobReport>();
        for (const r of reports) if (!first.has(r.keyHash)) first.set(r.keyHash, r);
        const completed = await lifecycle.complete([...first.values()]);
        return reports.map((r) => (first.get(r.keyHash) === r ? completed.get(r.keyHash) : undefined));
        // alone: a report the database refuses fails alone; the others of its batch get their answers.
      },
      { maxBatch: 128, maxInFlight: 2, alone: true },
    );
  }

  async complete(r: JobReport): Promise<Completion> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const done = await this.batcher.load(r);
      if (done) return { kind: 'completed', ...done };
      const explained = await explainReport(this.db, r);
      if (explained !== 'retry') return explained;
    }
    return { kind: 'refused', detail: `Job ${r.jobId} is being reported concurrently; nothing was credited by this call` };
  }
}
