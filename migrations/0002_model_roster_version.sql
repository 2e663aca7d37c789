-- Bumped whenever a model gains a node (its first success) or a success is recorded with an
-- explicit time (imports): servers keep each model's roster of nodes in memory and reload it
-- when this changes (src/repositories/model-roster.ts).
ALTER TABLE models ADD COLUMN roster_version bigint NOT NULL DEFAULT 0;
