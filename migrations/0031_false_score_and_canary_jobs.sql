-- Issue 53: a scorer that two other scorers contradict gets a strike of its own kind
-- (false_score, src/verify/scores.ts; the kinds are src/nodes/states.ts STRIKE_KINDS).
ALTER TABLE node_strikes DROP CONSTRAINT node_strikes_kind_check;
ALTER TABLE node_strikes ADD CONSTRAINT node_strikes_kind_check CHECK (kind IN ('disagreement', 'replay', 'too_fast', 'give_up', 'failure', 'impostor', 'false_request_error', 'false_score'));
