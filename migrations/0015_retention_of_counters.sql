-- Retention of the rows nothing prunes otherwise (src/retention/sql.ts; docs/operations.md,
-- "Retention"): usage counters of past days, idle fair-queue lanes, and worker sessions long
-- unseen (workers that crashed without deregistering). Each is walked oldest first, in batches:
-- these indexes find the oldest without a scan of the table.
CREATE INDEX key_usage_day ON key_usage (day);
CREATE INDEX node_sessions_last_seen ON node_sessions (last_seen_at);
-- A session is kept while it is its node's last seen: found per node without a walk of its history.
CREATE INDEX node_sessions_node_seen ON node_sessions (node_id, last_seen_at);
CREATE INDEX fair_lanes_last_key ON fair_lanes (last_key);
