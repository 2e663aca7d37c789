-- Checked delivery (issue 55; docs/verification.md, "Checked delivery"): an answer is given to
-- the application only once an independent check of it passed.

-- A user key's delivery: 'immediate' (the answer as soon as a node reports it, as before) or
-- 'checked' (every job of the key is held until checked). `ins key set-delivery`.
ALTER TABLE api_keys ADD COLUMN delivery text NOT NULL DEFAULT 'immediate' CHECK (delivery IN ('immediate', 'checked'));

-- A job's delivery (src/jobs/states.ts DELIVERY_STATES): NULL, immediate; 'held' while its answer
-- waits for a check; 'checked' once one passed; 'unchecked' when no node could check it (the
-- application gets an error, never the answer). `delivery_from`: the job whose answer is held or
-- delivered when it is not the job's own — a re-run (a copy of the job, jobs.verify_of) after
-- the first answer failed its check. No foreign key: retention deletes jobs by age, copies with
-- their originals.
ALTER TABLE jobs ADD COLUMN delivery text CHECK (delivery IN ('held', 'checked', 'unchecked'));
ALTER TABLE jobs ADD COLUMN delivery_from uuid;
-- The auditor finds the held job of a re-run it audits (src/verify/delivery.ts).
CREATE INDEX jobs_delivery_from ON jobs (delivery_from) WHERE delivery = 'held';
-- GET /usage shows what checking cost a key today: its checked jobs and their checks
-- (src/repositories/api-keys.ts USAGE).
CREATE INDEX jobs_checked_by_key ON jobs (owner_key_id, submitted_at) WHERE delivery IS NOT NULL;
