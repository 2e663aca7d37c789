// Transitions of a held job's delivery (jobs/states.ts DELIVERY_STATES, with its diagram):
// held → checked (a check of its answer passed, or two other nodes agreed on another answer,
// delivered in its place), held → unchecked (nobody could check it: withheld for good), and a
// re-run taking the failed answer's place while held. Verification decides (verify/delivery.ts);
// these are its only writes to jobs.delivery. Each changes only a job still holding the answer the
// decision was about (`coalesce(delivery_from, id)`), so a late decision about an older answer
// changes nothing.
import { sql } from '../../db/database.js';

// Deliver: $1 held jobs, $2 the candidate each was holding (a decision about an older candidate
// changes nothing), $3 the job whose answer is delivered (the job itself: NULL in delivery_from).
export const PASS = sql(
  'jobs_delivery_pass',
  `UPDATE jobs j SET delivery = 'checked', delivery_from = CASE WHEN d.deliver = j.id THEN NULL ELSE d.deliver END
  FROM unnest($1::uuid[], $2::uuid[], $3::uuid[]) AS d(job, candidate, deliver)
  WHERE j.id = d.job AND j.delivery = 'held' AND coalesce(j.delivery_from, j.id) = d.candidate RETURNING j.id::text`,
);
// Nobody could check: $1 held jobs, $2 their candidates.
export const UNCHECKED = sql(
  'jobs_delivery_unchecked',
  `UPDATE jobs j SET delivery = 'unchecked' FROM unnest($1::uuid[], $2::uuid[]) AS d(job, candidate)
  WHERE j.id = d.job AND j.delivery = 'held' AND coalesce(j.delivery_from, j.id) = d.candidate RETURNING j.id::text`,
);
// A re-run held in the failed candidate's place: $1 held jobs, $2 failed candidates, $3 re-runs.
export const RERUN = sql(
  'jobs_delivery_rerun',
  `UPDATE jobs j SET delivery_from = d.rerun FROM unnest($1::uuid[], $2::uuid[], $3::uuid[]) AS d(job, candidate, rerun)
  WHERE j.id = d.job AND j.delivery = 'held' AND coalesce(j.delivery_from, j.id) = d.candidate RETURNING j.id::text`,
);
