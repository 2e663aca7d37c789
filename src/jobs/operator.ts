// The operator's views of jobs (ins job list|show): newest first, with their attempts.
import { sql, type Queryable } from '../db/database.js';
import { isJobId } from './read.js';

/** kind: user (submitted), probe or verify (made by the coordinator to check nodes, docs/verification.md). */
export interface JobListing {
  id: string;
  kind: string;
  state: string;
  model: string;
  owner: string;
  node: string | null;
  attempts: number;
  submitted_at: string;
  finished_at: string | null;
}
export interface LeaseListing {
  attempt: number;
  node: string;
  leased_at: string;
  ended_at: string | null;
  outcome: string | null;
}
export interface JobDetail extends JobListing {
  verify_of: string | null;
  deadline_at: string;
  detail: string | null /** A request error as the node reported it (its own words: the user reads a fixed message, jobs/answer.ts). */;
  error: unknown;
  result: unknown;
  usage: unknown;
  request: unknown;
  leases: LeaseListing[];
}

const ISO = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`;
const COLUMNS = `j.id::text, j.kind, j.state, m.name AS model, coalesce(k.label, '-') AS owner, n.name AS node, j.attempts,
    ${ISO('j.submitted_at')} AS submitted_at, ${ISO('j.finished_at')} AS finished_at`;
const FROM = `jobs j JOIN models m ON m.id = j.model_id LEFT JOIN api_keys k ON k.id = j.owner_key_id LEFT JOIN nodes n ON n.id = j.node_id`;

// $1 state or NULL, $2 model name or NULL, $3 most rows.
const LIST = sql(
  'jobs_list',
  `SELECT ${COLUMNS} FROM ${FROM}
  WHERE ($1::text IS NULL OR j.state = $1::text) AND ($2::text IS NULL OR m.name = $2::text)
  ORDER BY j.submitted_at DESC, j.id LIMIT $3::int`,
);
const SHOW = sql(
  'jobs_show',
  `SELECT ${COLUMNS}, j.verify_of::text, ${ISO('j.deadline_at')} AS deadline_at, j.detail, j.error, j.result, j.usage, j.request
  FROM ${FROM} WHERE j.id = $1::uuid`,
);
const LEASES = sql(
  'jobs_show_leases',
  `SELECT l.attempt, n.name AS node, ${ISO('l.leased_at')} AS leased_at, ${ISO('l.ended_at')} AS ended_at, l.outcome
  FROM job_leases l JOIN nodes n ON n.id = l.node_id WHERE l.job_id = $1::uuid ORDER BY l.attempt`,
);

export async function listJobs(db: Queryable, filter: { state?: string; model?: string; limit: number }): Promise<JobListing[]> {
  return db.query<JobListing>(LIST, [filter.state ?? null, filter.model ?? null, filter.limit]);
}

export async function showJob(db: Queryable, id: string): Promise<JobDetail | undefined> {
  if (!isJobId(id)) return undefined;
  const [job] = await db.query<Omit<JobDetail, 'leases'>>(SHOW, [id]);
  return job && { ...job, leases: await db.query<LeaseListing>(LEASES, [id]) };
}
