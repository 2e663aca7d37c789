-- Capabilities and request-owned errors (issue 28; docs/openai.md).

-- What the session's node can do with each declared model (src/jobs/capabilities.ts: one bit
-- per capability), aligned with `models`: model_caps[i] is for models[i]. Empty (the seed
-- system's worker declares none): every model plain. A job whose request needs capabilities
-- (jobs.request -> 'needs') is leased only to a session with all of them for its model.
ALTER TABLE node_sessions ADD COLUMN model_caps integer[] NOT NULL DEFAULT '{}';

-- What a job needs of its node (the bits of jobs.request -> 'needs'; 0: a plain job), as a
-- column so that the lease statement (src/jobs/sql/lease.ts) compares it without reading the
-- request: generated, so that every statement inserting jobs (submissions, verification's
-- copies of them) sets it by itself. Adding it rewrites the jobs table once.
ALTER TABLE jobs ADD COLUMN needs integer NOT NULL GENERATED ALWAYS AS (coalesce((request ->> 'needs')::integer, 0)) STORED;

-- A job failed by its own request (a backend's 4xx about it: context length, invalid schema):
-- the backend's error, as OpenAI's error object {type, code, message}; /v1 answers 400 with it.
ALTER TABLE jobs ADD COLUMN error jsonb;

-- The lease that ended so: counted per node (a node that claims it too often is suspicious).
ALTER TABLE job_leases DROP CONSTRAINT job_leases_outcome_check;
ALTER TABLE job_leases ADD CONSTRAINT job_leases_outcome_check
  CHECK (outcome IN ('done', 'error', 'expired', 'released', 'abandoned', 'deadline', 'canceled', 'request_error')) NOT VALID;
