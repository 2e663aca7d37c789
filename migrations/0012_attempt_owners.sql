-- Every end of an attempt has an owner (docs/coordinator.md, "Whose fault an attempt's end is").

-- A node-owned end of an attempt (an error report, a lease that ran out) keeps that node off the
-- job (jobs.exclude_nodes), and repeated node-owned ends count against the node: a strike of
-- their own kind, `failure`, every VERIFY_FAILURES of them (src/verify/failures.ts).
ALTER TABLE node_strikes DROP CONSTRAINT node_strikes_kind_check;
ALTER TABLE node_strikes ADD CONSTRAINT node_strikes_kind_check CHECK (kind IN ('disagreement', 'replay', 'too_fast', 'give_up', 'failure'));
