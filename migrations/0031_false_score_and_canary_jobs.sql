-- Issue 53: a scorer that two other scorers contradict gets a strike of its own kind
-- (false_score, src/verify/scores.ts; the kinds are src/nodes/states.ts STRIKE_KINDS).
ALTER TABLE node_strikes DROP CONSTRAINT node_strikes_kind_check;
ALTER TABLE node_strikes ADD CONSTRAINT node_strikes_kind_check CHECK (kind IN ('disagreement', 'replay', 'too_fast', 'give_up', 'failure', 'impostor', 'false_request_error', 'false_score'));

-- Canaries sent as ordinary jobs (issue 53; src/verify/canaries.ts): a lone node's answer to a
-- reference's request is judged against the reference's answer where the two first part, by how
-- sure the reference's two scorers were there: their smaller top-1 − top-2 gap (nats) at each
-- character of the answer (a JSON array; NULL where the tokens' characters were unknown).
ALTER TABLE canaries ADD COLUMN gaps jsonb;
