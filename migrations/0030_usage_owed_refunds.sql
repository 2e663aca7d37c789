-- A row of usage_owed may stand for no finished job: an answer /v1 could not give its app gives
-- its tokens back (src/verify/rejected-answers.ts), for a job already counted when it finished.
ALTER TABLE usage_owed DROP CONSTRAINT usage_owed_jobs_check;
ALTER TABLE usage_owed ADD CONSTRAINT usage_owed_jobs_check CHECK (jobs >= 0);
