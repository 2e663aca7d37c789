-- What finished jobs owe their owners' usage, kept beside the jobs instead of marked on them
-- (issue 30: fewer writes per job; src/usage/, docs/coordinator.md "Quotas").
--
-- Before, the settler found finished jobs whose usage was not folded yet by jobs.usage_day (set
-- until settled, index jobs_unsettled) and set it to NULL once folded: a second update of every
-- job's row, never HOT (usage_day is in that index's predicate), with its two index entries,
-- and a third entry at the job's end. Now the statement that finishes jobs — whichever it is:
-- a report, the sweep, a cancel — leaves what they owe in usage_owed through the trigger
-- below, one row per owner, day and model of that statement, and the settler takes these rows
-- (DELETE … RETURNING) and folds them into key_usage; the job's row is written once at its end.
--
-- The amount is what the settler computed before, from the job as the finishing statement left
-- it: a done job's reserved tokens become its charged output tokens (jobs.usage; the
-- reservation when it reported none), a failed, expired or canceled job's are given back.
-- A finished state is final, so each job is owed once. `jobs` counts the finished jobs a row
-- stands for (those whose amount is 0 too), for the settler's report.
--
-- The table has no index: the settler takes its rows in any order, and they live about a second.
-- A job deleted by retention before its usage was folded no longer loses its give-back.
CREATE TABLE usage_owed (
  key_id   bigint  NOT NULL,
  day      date    NOT NULL,
  model_id integer NOT NULL,
  tokens   bigint  NOT NULL,
  jobs     integer NOT NULL CHECK (jobs > 0)
);

-- What a finished job owes its owner's usage, against its reservation: the one rule, used by the
-- backfill below and by the trigger (SQL, inlined where it is called).
CREATE FUNCTION job_owed_tokens(state text, usage jsonb, reserved_tokens bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN state = 'done' THEN coalesce((usage ->> 'completion_tokens')::bigint, reserved_tokens) - reserved_tokens ELSE -reserved_tokens END
$$;

-- The jobs still owed when this migration runs.
INSERT INTO usage_owed (key_id, day, model_id, tokens, jobs)
SELECT owner_key_id, usage_day, model_id, sum(job_owed_tokens(state, usage, reserved_tokens)), count(*)
FROM jobs WHERE usage_day IS NOT NULL AND finished_at IS NOT NULL AND owner_key_id IS NOT NULL
GROUP BY 1, 2, 3;
DROP INDEX jobs_unsettled;

-- After every update of jobs (one call per statement, as job_counts_updated, 0010_retention.sql):
-- the jobs this statement finished, with an owner and a usage day. (No job is inserted finished:
-- src/jobs/sql/submit.ts inserts them queued or leased.)
CREATE FUNCTION usage_owed_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO usage_owed (key_id, day, model_id, tokens, jobs)
  SELECT n.owner_key_id, n.usage_day, n.model_id, sum(job_owed_tokens(n.state, n.usage, n.reserved_tokens)), count(*)
  FROM new_jobs n JOIN old_jobs o ON o.id = n.id
  WHERE n.finished_at IS NOT NULL AND o.finished_at IS NULL AND n.owner_key_id IS NOT NULL AND n.usage_day IS NOT NULL
  GROUP BY 1, 2, 3;
  RETURN NULL;
END $$;

CREATE TRIGGER usage_owed_updated AFTER UPDATE ON jobs
  REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION usage_owed_updated();
