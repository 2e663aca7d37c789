-- Every failed attempt has an owner, the remainder (issue 29; docs/coordinator.md, "Whose fault
-- an attempt's end is").

-- The sweep (src/jobs/sql/sweep.ts) fails a queued job some node failed when no node that may
-- take it remains: it looks only at queued jobs with a failure, few next to the queue.
CREATE INDEX jobs_queued_failed ON jobs (model_id) WHERE state = 'queued' AND failures > 0;
