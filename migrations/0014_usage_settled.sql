-- Token usage settled in batches (issue 30; src/usage/). A job's reservation is still taken at
-- submission (key_usage, sql/submit.ts); what it finally costs — the node's reported output
-- tokens for a done job, nothing for a failed, expired or canceled one — is folded into key_usage
-- about once a second by one server at a time (src/usage/settle.ts), no longer by the completion,
-- the sweep and the cancel statements: the owner's hot row left the job's statements.
--
-- jobs.usage_day now also says what is left to settle: set at submission, and NULL once the
-- settler has folded the finished job's usage (a finished job with a usage_day is owed). The
-- finished jobs of before this migration were settled by those statements: nothing is owed.
UPDATE jobs SET usage_day = NULL WHERE finished_at IS NOT NULL AND usage_day IS NOT NULL;
CREATE INDEX jobs_unsettled ON jobs (finished_at) WHERE usage_day IS NOT NULL AND finished_at IS NOT NULL;
