-- Every end of an attempt has an owner (docs/coordinator.md, "Whose fault an attempt's end is").

-- A node-owned end of an attempt (an error report, a lease that ran out) keeps that node off the
-- job (jobs.exclude_nodes), and repeated node-owned ends count against the node: a strike of
-- their own kind, `failure`, every VERIFY_FAILURES of them (src/verify/failures.ts).
ALTER TABLE node_strikes DROP CONSTRAINT node_strikes_kind_check;
ALTER TABLE node_strikes ADD CONSTRAINT node_strikes_kind_check CHECK (kind IN ('disagreement', 'replay', 'too_fast', 'give_up', 'failure'));

-- Whether a node that may take a job of model `model` remains: an open session, seen within
-- `online_seconds`, that declared the model, of an enabled node in good standing (not
-- suspended) outside `excluded`. A job whose every possible node failed it fails at once
-- rather than waiting for its deadline. It is asked only when an attempt fails (the complete
-- and sweep statements, src/jobs/sql/), through node_sessions_live: cheap, and never on the
-- lease path.
CREATE FUNCTION jobs_node_remains(model integer, excluded bigint[], online_seconds float8)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1 FROM node_sessions s JOIN nodes n ON n.id = s.node_id
    WHERE s.ended_at IS NULL AND s.models @> ARRAY[model] AND NOT (s.node_id = ANY(excluded))
      AND s.last_seen_at > now() - make_interval(secs => online_seconds)
      AND n.disabled_at IS NULL AND n.key_hash = s.node_key_hash
      AND NOT EXISTS (SELECT 1 FROM node_standing r WHERE r.node_id = s.node_id AND r.state = 'suspended'))
$$;
