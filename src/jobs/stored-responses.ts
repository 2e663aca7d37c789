// A stored response of the Responses API (POST /v1/responses, docs/responses.md) is the job that
// answered it: the jobs already keep request and answer until JOB_RETENTION, readable only by
// their owner's key. What the door keeps beside the job's request is `request.front`
// (jobs/request.ts): the request's own fields the response object repeats, the conversation the
// job ran, and whether it may be read back (`store`). Deleting a stored response forgets it for
// the API (`front.deleted`): the job's record itself stays until retention, as every job's does
// (its credit, its usage and verification need it).
import { sql, type Queryable } from '../db/database.js';
import type { Answer, RequestError, Usage } from './answer.js';
import type { JobRequest } from './request.js';
import type { JobState } from './states.js';

export interface StoredJob {
  id: string;
  model: string;
  state: JobState;
  request: JobRequest;
  result: Answer | null;
  usage: Usage | null;
  detail: string | null;
  error: RequestError | null;
  /** Seconds since the epoch at submission (the response's created_at). */
  created: number;
}

// The key's own job, its request whole ($1 the job id, $2 the owner's key id). Under checked
// delivery (states.ts DELIVERY_STATES) an answer is the owner's only once checked, as in
// read.ts: a held job reads as still running, one nobody could check as failed, a checked one
// with the answer that passed (a re-run's, r, where the first failed).
const STORED = sql(
  'jobs_stored_response',
  `SELECT j.id::text, m.name AS model,
    CASE WHEN j.state <> 'done' OR j.delivery IS NULL OR j.delivery = 'checked' THEN j.state
      WHEN j.delivery = 'held' AND j.deadline_at >= now() THEN 'leased' ELSE 'failed' END AS state,
    j.request,
    CASE WHEN j.delivery IS NULL THEN j.result WHEN j.delivery = 'checked' THEN coalesce(r.result, j.result) END AS result,
    CASE WHEN j.delivery IS NULL THEN j.usage WHEN j.delivery = 'checked' THEN coalesce(r.usage, j.usage) END AS usage,
    CASE WHEN j.state = 'done' AND j.delivery IN ('held', 'unchecked') THEN 'checked delivery: no other node could check the answer within the job''s deadline, so it is withheld'
      ELSE j.detail END AS detail,
    j.error, floor(extract(epoch FROM j.submitted_at))::int AS created
  FROM jobs j JOIN models m ON m.id = j.model_id LEFT JOIN jobs r ON r.id = j.delivery_from
  WHERE j.id = $1::uuid AND j.owner_key_id = $2`,
);

// Forgets a stored response ($1 the job id, $2 the owner's key id): one key of the request's
// `front`, which no node reads and no lifecycle statement looks at. Returns whether it was there.
const FORGET = sql(
  'jobs_forget_response',
  `UPDATE jobs SET request = jsonb_set(request, '{front,deleted}', 'true'::jsonb)
  WHERE id = $1::uuid AND owner_key_id = $2 AND request ? 'front' AND NOT coalesce((request -> 'front' ->> 'deleted')::boolean, false)
  RETURNING id::text`,
);

export async function storedJob(db: Queryable, jobId: string, owner: number): Promise<StoredJob | undefined> {
  const [row] = await db.query<StoredJob>(STORED, [jobId, owner]);
  return row;
}

export async function forgetResponse(db: Queryable, jobId: string, owner: number): Promise<boolean> {
  return (await db.query(FORGET, [jobId, owner])).length > 0;
}
