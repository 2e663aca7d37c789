// Reading jobs: a user's own job, the network's counts and models, and the operator's views.
import { sql, type Queryable } from '../db/database.js';
import { Batcher } from '../db/batcher.js';
import { liveSession, servingSession } from '../db/rules/live.js';
import type { DeliveryState, JobState } from './states.js';
import type { Answer, RequestError, Usage } from './answer.js';
import { chatsSql } from './capabilities.js';

export interface UserJob {
  id: string;
  model: string;
  modelId: number;
  state: JobState;
  result: Answer | null;
  usage: Usage | null;
  detail: string | null;
  /** A job failed by its own request: the backend's error (jobs.error). */
  error: RequestError | null;
  submitted_at: string;
  finished_at: string | null;
  /** Seconds from submission to the final state, or null while open. */
  seconds: number | null;
  /** Seconds from submission to the first lease, or null before it. */
  queuedSeconds: number | null;
  /**
   * Checked delivery (states.ts DELIVERY_STATES): null, immediate. While `held`, `result` and
   * `usage` are null (the answer is not the owner's yet); `checked`, they are the answer that
   * passed its check (a re-run's where the first failed); `unchecked` (nobody could check it,
   * or the deadline passed while held): null.
   */
  delivery: DeliveryState | null;
  /** While leased, the holder; once done, the node that did it. */
  nodeId: number | null;
}

const ISO = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

// Many reads at once (db/batcher.ts): $1 job ids, $2 their owners' key ids. Another user's
// job is not found. A held answer is no answer yet (checked delivery: r, the re-run whose answer
// is delivered in its place, docs/verification.md "Checked delivery").
const OWN_JOBS = sql(
  'jobs_own',
  `SELECT q.i::int AS i, j.id::text, m.name AS model, j.model_id AS "modelId", j.state, j.detail, j.error,
    CASE WHEN j.delivery IS NULL THEN j.result WHEN j.delivery = 'checked' THEN coalesce(r.result, j.result) END AS result,
    CASE WHEN j.delivery IS NULL THEN j.usage WHEN j.delivery = 'checked' THEN coalesce(r.usage, j.usage) END AS usage,
    CASE WHEN j.delivery = 'held' AND j.deadline_at < now() THEN 'unchecked' ELSE j.delivery END AS delivery,
    ${ISO('j.submitted_at')} AS submitted_at, ${ISO('j.finished_at')} AS finished_at,
    extract(epoch FROM j.finished_at - j.submitted_at)::float8 AS seconds,
    extract(epoch FROM j.first_leased_at - j.submitted_at)::float8 AS "queuedSeconds", j.node_id::int AS "nodeId"
  FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS q(id, owner, i)
  JOIN jobs j ON j.id = q.id AND j.owner_key_id = q.owner JOIN models m ON m.id = j.model_id
  LEFT JOIN jobs r ON r.id = j.delivery_from`,
);

// Live sessions of enabled nodes seen within $1 seconds (db/rules/live.ts), with a declaration younger than $2 seconds.
const LIVE = liveSession('s', 'n', '$1');
// caps: what some node can do with the model (jobs/capabilities.ts bits, OR-ed over its sessions).
// `chat`: some node serving it answers chat (not an embedding model alone: jobs/capabilities.ts).
// A suspended node serves nothing (docs/verification.md): its models are not listed, so a request
// for a model only it declared is refused at once rather than left to wait for its deadline.
const AVAILABLE_MODELS = sql(
  'jobs_available_models',
  `SELECT m.name, count(DISTINCT s.node_id)::int AS nodes, bit_or(coalesce(d.caps, 0))::int AS caps,
    bool_or(${chatsSql('d.caps')}) AS chat, array_agg(DISTINCT coalesce(d.caps, 0)) AS combos
  FROM node_sessions s JOIN nodes n ON n.id = s.node_id
  CROSS JOIN LATERAL unnest(s.models, s.model_caps) AS d(model_id, caps) JOIN models m ON m.id = d.model_id
  WHERE ${servingSession('s', 'n', '$1', '$2')}
  GROUP BY m.name ORDER BY m.name COLLATE "C"`,
);
const ACTIVE_NODES = sql(
  'jobs_active_nodes',
  `SELECT count(DISTINCT s.node_id)::int AS n
  FROM node_sessions s JOIN nodes n ON n.id = s.node_id WHERE ${LIVE}`,
);
// Jobs ever, per state: the counters the jobs' triggers maintain (migrations/0010_retention.sql),
// at most 16 shards per state — the same cost at any size of history, and retention's deletes
// do not lower them.
const JOB_COUNTS = sql('jobs_counts', 'SELECT state, sum(jobs)::bigint AS n FROM job_counts GROUP BY state');
const QUEUE_DEPTH = sql(
  'jobs_queue_depth',
  `SELECT m.name AS model, count(*)::int AS n FROM jobs j JOIN models m ON m.id = j.model_id
  WHERE j.state = 'queued' GROUP BY m.name`,
);
const OPEN_LEASES = sql('jobs_open_leases', 'SELECT count(*)::int AS n FROM job_leases WHERE ended_at IS NULL');
// $1 job ids: those in a final state.
const FINAL_JOBS = sql('jobs_final', `SELECT id::text FROM jobs WHERE id = ANY($1::uuid[]) AND state IN ('done', 'failed', 'expired', 'canceled')`);

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isJobId = (id: string): boolean => UUID.test(id);

/**
 * The job id `id` spells in any form PostgreSQL's uuid type reads (no hyphens, braces, capitals),
 * canonical; undefined when it spells none. A job of this network must not be credited again
 * under another spelling of its id (routes/update-result.ts).
 */
export function jobIdSpelled(id: string): string | undefined {
  const hex = id
    .replace(/^\{(.*)\}$/, '$1')
    .replace(/-/g, '')
    .toLowerCase();
  if (!/^[0-9a-f]{32}$/.test(hex)) return undefined;
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Reads users' own jobs, sharing statements between concurrent reads. */
export class JobReader {
  private readonly batcher: Batcher<{ jobId: string; owner: number }, UserJob | undefined>;

  constructor(db: Queryable) {
    this.batcher = new Batcher(
      async (asks) => {
        const rows = await db.query<UserJob & { i: number }>(OWN_JOBS, [asks.map((a) => a.jobId), asks.map((a) => a.owner)]);
        const out = new Array<UserJob | undefined>(asks.length);
        for (const { i, ...job } of rows) out[i - 1] = job;
        return out;
      },
      { maxBatch: 128, maxInFlight: 2 },
    );
  }

  /** The job if it exists and is this key's. */
  async own(jobId: string, ownerKeyId: number): Promise<UserJob | undefined> {
    return isJobId(jobId) ? this.batcher.load({ jobId, owner: ownerKeyId }) : undefined;
  }
}

/** The served models: `caps` what some node can do with each, `combos` what each node can (the distinct sets: a job goes to one node). */
export async function availableModels(
  db: Queryable,
  onlineSeconds: number,
  modelsTtlSeconds: number,
): Promise<{ name: string; nodes: number; caps: number; chat: boolean; combos: number[] }[]> {
  return db.query(AVAILABLE_MODELS, [onlineSeconds, modelsTtlSeconds]);
}

export async function activeNodeCount(db: Queryable, onlineSeconds: number): Promise<number> {
  const [row] = await db.query<{ n: number }>(ACTIVE_NODES, [onlineSeconds]);
  return row!.n;
}

export async function jobCounts(db: Queryable): Promise<Record<JobState, number>> {
  const counts: Record<string, number> = { queued: 0, leased: 0, done: 0, failed: 0, expired: 0, canceled: 0 };
  for (const r of await db.query<{ state: string; n: number }>(JOB_COUNTS)) counts[r.state] = r.n;
  return counts;
}

export async function queueDepth(db: Queryable): Promise<{ model: string; n: number }[]> {
  return db.query(QUEUE_DEPTH);
}

/** Which of these jobs are in a final state. */
export async function finalJobs(db: Queryable, jobIds: string[]): Promise<string[]> {
  return (await db.query<{ id: string }>(FINAL_JOBS, [jobIds.filter(isJobId)])).map((r) => r.id);
}

export async function openLeases(db: Queryable): Promise<number> {
  const [row] = await db.query<{ n: number }>(OPEN_LEASES);
  return row!.n;
}
