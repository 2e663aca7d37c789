-- Per-group thresholds of the token-level test (issue 31; docs/verification.md "Token-level
-- checks"; src/verify/thresholds.ts). An honest node at a heavy quantisation, checked by a scorer
-- of the same quantisation, can show more confident mismatches than the global P0
-- (src/verify/token-stats.ts): judged by the global thresholds it would drift towards a false flag.

-- The judged node's declared quantisation of the model (session_model_builds) when the check was
-- judged: the audited job's answering session's, for a canary the scoring node's; NULL when it
-- declared none. Calibration groups checks by it.
ALTER TABLE token_checks ADD COLUMN quantization text;

-- The thresholds (honest rate p0, impostor rate p1, per scored position) that judge a check of
-- this model, by this scoring method (scores.method: prefill, replay) of a node declaring this
-- quantisation ('' = none declared; src/verify/scores.ts falls back from a node's quantisation to
-- '' and then to the global P0, P1). Written only by the operator's `ins verify calibrate
-- --apply` (src/cli/verify-commands.ts), from honest nodes' checks of each other in token_checks;
-- answers, positions and mismatches are the evidence the proposal was made from.
CREATE TABLE token_thresholds (
  model_id     integer NOT NULL,
  method       text NOT NULL,
  quantization text NOT NULL DEFAULT '',
  p0           double precision NOT NULL,
  p1           double precision NOT NULL,
  answers      integer NOT NULL,
  positions    bigint NOT NULL,
  mismatches   bigint NOT NULL,
  set_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (model_id, method, quantization),
  CHECK (0 < p0 AND p0 < p1 AND p1 < 1)
);
