// Where open jobs stand (not a transition: a read for GET /get_result's 404 body, refreshed for
// the jobs being polled, jobs/open-jobs.ts): queued or leased, and the jobs ahead of each in its
// model's queue, in the order leases take them: the fair order (fair_key, id) of sql/lease.ts.
import { sql, type Queryable } from '../../db/database.js';

// $1 job ids. Jobs not open are left out.
export const STANDINGS = sql(
  'jobs_standings',
  `SELECT a.id::text AS id, a.state, a.model_id AS model,
    CASE WHEN a.state = 'leased' THEN 0 ELSE (SELECT count(*)::int FROM jobs q WHERE q.state = 'queued' AND q.verify_of IS NULL
      AND q.model_id = a.model_id AND (q.fair_key, q.id) < (a.fair_key, a.id)) END AS position
  FROM jobs a WHERE a.id = ANY($1::uuid[]) AND a.state IN ('queued', 'leased')`,
);

export interface JobStanding {
  state: 'queued' | 'leased';
  model: number;
  position: number;
}

export async function standingsOf(db: Queryable, jobIds: string[]): Promise<Map<string, JobStanding>> {
  const rows = await db.query<JobStanding & { id: string }>(STANDINGS, [jobIds]);
  return new Map(rows.map(({ id, ...s }) => [id, s]));
}
