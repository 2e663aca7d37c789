-- Issue 53: the token sequence a node's worker reported for a done job's plain text answer
-- (UpdateResultRequest's result.tokens, src/validation/answer-tokens.ts), kept beside the
-- answer for verification only: a score check forces exactly these tokens (src/verify/scores.ts,
-- docs/verification.md) instead of re-tokenizing the text. NULL where the node reported none
-- (the seed's workers, a continued answer, a backend that cannot say). Not part of `result`, so
-- get_result and /v1 answers are as before; retention removes it with its job.
ALTER TABLE jobs ADD COLUMN tokens jsonb;
