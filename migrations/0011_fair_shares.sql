-- Fair shares for applications (README, "Quotas, priorities and fairness"; docs/coordinator.md).

-- Per user key: a daily quota of jobs and of output tokens (NULL: the configured default,
-- DEFAULT_QUOTA_JOBS / DEFAULT_QUOTA_TOKENS; `ins key set-quota`), and a priority, the weight
-- of its share of each model's queue (`ins key set-priority`, default 1).
ALTER TABLE api_keys ADD COLUMN quota_jobs bigint CHECK (quota_jobs >= 0);
ALTER TABLE api_keys ADD COLUMN quota_tokens bigint CHECK (quota_tokens >= 0);
ALTER TABLE api_keys ADD COLUMN priority real NOT NULL DEFAULT 1 CHECK (priority > 0 AND priority <= 1000);

-- What a key used per UTC day: jobs accepted and output tokens (reserved for its open jobs, the
-- node's reported count for its finished ones). model_id 0 is the key's total for the day: the
-- one counter the submit statement (src/jobs/sql/submit.ts) checks and raises in one
-- conditional upsert, and GET /usage reads; the rows per model are kept beside it in the same
-- statements. prev_jobs/prev_tokens: the total before the statement's last change (so that it
-- can tell which of its jobs fit).
CREATE TABLE key_usage (
  key_id      bigint NOT NULL,
  day         date NOT NULL,
  model_id    integer NOT NULL,
  jobs        bigint NOT NULL DEFAULT 0,
  tokens      bigint NOT NULL DEFAULT 0,
  prev_jobs   bigint NOT NULL DEFAULT 0,
  prev_tokens bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (key_id, day, model_id)
);

-- A job's part of its owner's usage: the day it was counted on and the tokens reserved for it
-- (max_output, or QUOTA_RESERVE_TOKENS when it sets none), settled to the node's count when it
-- is done and given back when it fails, expires or is canceled.
ALTER TABLE jobs ADD COLUMN usage_day date;
ALTER TABLE jobs ADD COLUMN reserved_tokens bigint NOT NULL DEFAULT 0;

-- Fair queueing (start-time fair queueing): each queued job has a start tag, fair_key; leases
-- take a model's queued jobs by (fair_key, id). A job's tag is its owner's last tag for the
-- model plus 1/priority, but never below the model's virtual time (the smallest tag queued,
-- or the wall clock's epoch seconds when none is): a light user's new job starts at the head,
-- a heavy backlog runs ahead. Copies and probes take the default and keep their own order.
ALTER TABLE jobs ADD COLUMN fair_key float8 NOT NULL DEFAULT extract(epoch FROM now());
UPDATE jobs SET fair_key = extract(epoch FROM submitted_at) WHERE state = 'queued';
CREATE TABLE fair_lanes (
  owner_key_id bigint NOT NULL,
  model_id     integer NOT NULL,
  last_key     float8 NOT NULL,
  PRIMARY KEY (owner_key_id, model_id)
);
DROP INDEX jobs_queued;
CREATE INDEX jobs_queued ON jobs (model_id, fair_key, id) WHERE state = 'queued' AND verify_of IS NULL;
-- A lane's last queued job (the submit statement continues after it, or restarts at the head).
CREATE INDEX jobs_queued_lanes ON jobs (model_id, owner_key_id, fair_key) WHERE state = 'queued' AND verify_of IS NULL;
