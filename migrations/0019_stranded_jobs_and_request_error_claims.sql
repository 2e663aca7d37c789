-- Every failed attempt has an owner, the remainder (issue 29; docs/coordinator.md, "Whose fault
-- an attempt's end is").

-- The sweep (src/jobs/sql/sweep.ts) fails a queued job some node failed when no node that may
-- take it remains: it looks only at queued jobs with a failure, few next to the queue.
CREATE INDEX jobs_queued_failed ON jobs (model_id) WHERE state = 'queued' AND failures > 0;

-- A node's claim that a job's own request was at fault (an error report of type
-- invalid_request_error: the job fails at once, 400, no retry) is audited: the job is copied to
-- another node (src/verify/request-errors.ts), and when that node answers it, the claimer gets
-- a `false_request_error` strike.
ALTER TABLE node_strikes DROP CONSTRAINT node_strikes_kind_check;
ALTER TABLE node_strikes ADD CONSTRAINT node_strikes_kind_check CHECK (kind IN ('disagreement', 'replay', 'too_fast', 'give_up', 'failure', 'impostor', 'false_request_error'));
