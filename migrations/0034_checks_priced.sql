-- Issue 55: score checks earn points in proportion to their work (docs/verification.md, "Checks
-- priced by their work"), and a node's points show them apart from its answers.

-- A credit for a score check (the job's request carried params.score): set by jobs_complete
-- (src/jobs/sql/complete.ts) through the credit part (src/results/credit.ts); false for every
-- other credit, reports and imports included. The ledger's entries are unchanged.
ALTER TABLE job_results ADD COLUMN is_check boolean NOT NULL DEFAULT false;

-- Of a node's day (points, successes): the score checks' share, kept by the same statements
-- (the credit part adds, src/verify/reversal.ts takes back). daily_points still reads `points`.
ALTER TABLE node_daily_points ADD COLUMN check_points numeric NOT NULL DEFAULT 0;
ALTER TABLE node_daily_points ADD COLUMN checks integer NOT NULL DEFAULT 0;
