-- Canaries (issue 31; docs/verification.md "Canaries"; src/verify/canaries.ts): answers a
-- score check found in line with the scorer's model, kept as references, so that a model only
-- one node serves can still be checked — that node is asked to score a stored reference answer,
-- as a score check asks, and its scores are judged as a score check's are.
--
-- Bounded: at most CANARIES_PER_MODEL (src/verify/canaries.ts) per model, the newest kept; and
-- pruned by retention with the jobs they come from (a reference holds the request and the answer
-- of a job: it never outlives that job's retention, src/retention/sql.ts).
-- - job_id: the job whose answer it is (a canary is queued as a check of that job);
-- - quantization: what the answering node declared for the model (session_model_builds), if
--   anything: a canary prefers a reference of the probed node's own quantisation;
-- - vouched: the answering node and the scorer that found its answer in line: a reference
--   either of them no longer vouches for (suspended since) is not sent;
-- - seen: every node that saw the request (the job's lease holders, the scorer, and each node a
--   canary of it was sent to): a node is never sent a request it saw, which would tell it a
--   canary from a score check.
CREATE TABLE canaries (
  job_id       uuid PRIMARY KEY,
  model_id     integer NOT NULL,
  quantization text,
  request      jsonb NOT NULL,
  answer       text NOT NULL,
  vouched      bigint[] NOT NULL,
  seen         bigint[] NOT NULL,
  at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX canaries_model ON canaries (model_id, at);
CREATE INDEX canaries_at ON canaries (at);
