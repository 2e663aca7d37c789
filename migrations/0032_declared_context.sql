-- Nodes declare their context length with their models (issue 53; docs/verification.md,
-- "Request-error claims"), and a job's length is known to the statements that give it out.

-- The context length (tokens) the session's node declared for each model, aligned with
-- `models` as model_caps is: model_contexts[i] is for models[i]; 0 or absent: none declared
-- (the seed system's worker declares none). A job longer than a declared context is not
-- leased to that session (src/jobs/sql/lease.ts); a request error is a strike only when the
-- declaration covered the request (src/jobs/sql/complete.ts, src/verify/request-errors.ts).
ALTER TABLE node_sessions ADD COLUMN model_contexts integer[] NOT NULL DEFAULT '{}';

-- A job's request in UTF-8 bytes as stored (what the front door keeps with it, `front`, left
-- out): an upper bound on its prompt's tokens, since every token of a text stands for at least
-- one byte of it and the JSON around each message outweighs a chat template's tokens for it
-- (src/jobs/context.ts). Generated, as `needs` is (migrations/0013), so that every statement
-- inserting jobs (submissions, copies, probes) sets it by itself. Adding it rewrites jobs once.
ALTER TABLE jobs ADD COLUMN request_bytes integer NOT NULL GENERATED ALWAYS AS (octet_length((request - 'front')::text)) STORED;
