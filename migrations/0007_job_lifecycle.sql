-- One job lifecycle (docs/coordinator.md, src/jobs/states.ts): every transition is one
-- statement under src/jobs/sql/, each announcing what it changed through jobs_announce().

-- Attempts that count towards MAX_ATTEMPTS: a lease that ended in an error report or ran out of
-- time. A lease a node gave up (it deregistered, or asked for more jobs than it can hold) is no
-- failure of the job: it goes back to the queue without burning the user's attempts.
-- `attempts` keeps numbering the leases (job_leases (job_id, attempt) is unique).
ALTER TABLE jobs ADD COLUMN failures integer NOT NULL DEFAULT 0;
UPDATE jobs SET failures = CASE state WHEN 'leased' THEN attempts - 1 ELSE attempts END WHERE state IN ('queued', 'leased');

-- A streamed answer survives its node: the text the job's client has been sent so far (what
-- ended leases streamed), handed to the next lease as the answer's beginning (answer_prefix).
ALTER TABLE jobs ADD COLUMN streamed text NOT NULL DEFAULT '';

-- Partial output belongs to a lease: what it was handed as the answer's beginning, what it
-- streamed after that (POST /worker/job_progress, capped per lease), and the usage its report
-- gave (a job's usage adds up over its attempts).
ALTER TABLE job_leases ADD COLUMN prefix text NOT NULL DEFAULT '';
ALTER TABLE job_leases ADD COLUMN partial text NOT NULL DEFAULT '';
ALTER TABLE job_leases ADD COLUMN usage jsonb;

-- A lease also ends when its job is canceled (by its owner, or an operator).
ALTER TABLE job_leases DROP CONSTRAINT job_leases_outcome_check;
ALTER TABLE job_leases ADD CONSTRAINT job_leases_outcome_check
  CHECK (outcome IN ('done', 'error', 'expired', 'released', 'abandoned', 'deadline', 'canceled'));

-- A node that gives up the same job twice does not get it back (exclude_nodes, now for every
-- job, not only copies), and the repeat counts against it: a strike of its own kind.
ALTER TABLE node_strikes DROP CONSTRAINT node_strikes_kind_check;
ALTER TABLE node_strikes ADD CONSTRAINT node_strikes_kind_check CHECK (kind IN ('disagreement', 'replay', 'too_fast', 'give_up'));

-- The one announcement of the job lifecycle, read by src/jobs/outcome.ts: what a statement
-- changed, as comma-separated items, sent on NOTIFY ins_jobs (so only once it commits) in
-- payloads of at most 100 items (a payload holds at most 8000 bytes), and returned to the
-- statement, whose server applies it at once (the others apply the notification):
--   q:<model id>:<n>        n jobs of the model became queued (submitted, or back in the queue)
--   c:<model id>:<n>        n copies of jobs of the model (verification) were queued
--   f:<job id>:<state>:<model id>  the job reached a final state (done, failed, expired, canceled)
--   e:<job id>:<attempt>   the lease of that attempt ended and its job went back to the queue
-- A payload is `<server> <item>,<item>…`; <server> is the sender's id (it skips its own).
CREATE FUNCTION jobs_announce(server text, queued int[], copies int[], finished_ids uuid[], finished_states text[], finished_models int[], ended_ids uuid[], ended_attempts int[])
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  items text[] := ARRAY(SELECT 'q:' || m || ':' || count(*) FROM unnest(queued) AS m GROUP BY m ORDER BY m)
    || ARRAY(SELECT 'c:' || m || ':' || count(*) FROM unnest(copies) AS m GROUP BY m ORDER BY m)
    || ARRAY(SELECT 'f:' || f.id || ':' || f.state || ':' || f.model FROM unnest(finished_ids, finished_states, finished_models) AS f(id, state, model))
    || ARRAY(SELECT 'e:' || e.id || ':' || e.attempt FROM unnest(ended_ids, ended_attempts) AS e(id, attempt));
  n integer := coalesce(array_length(items, 1), 0);
BEGIN
  FOR i IN 0 .. n - 1 BY 100 LOOP
    PERFORM pg_notify('ins_jobs', server || ' ' || array_to_string(items[i + 1 : i + 100], ','));
  END LOOP;
  RETURN array_to_string(items, ',');
END $$;
