-- Bumped by every write that may change a node's points on a day before yesterday (UTC):
-- imports, and successes recorded with an explicit time. Reports through the API add to
-- today only (or to yesterday, when they commit just after midnight), so servers keep the
-- older days of a node's daily points in memory and drop them when this changes
-- (src/repositories/points.ts). It is read in the same statement as the points.
CREATE TABLE points_history (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  version  bigint NOT NULL DEFAULT 0
);
INSERT INTO points_history DEFAULT VALUES;

-- No schema change, a change of meaning: from this version on, models.roster_version (0002)
-- is also bumped by a node's first success of each UTC day for the model, so that rosters
-- can rule out nodes that have been quiet since before a window's first day.
