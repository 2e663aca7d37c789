-- Token-level checks of answers (issue 31; docs/verification.md "Token-level checks";
-- src/verify/scores.ts). A node that can score (capability `score`) re-scores an audited answer
-- token by token; the coordinator sums each answer up (src/verify/token-stats.ts) and keeps a
-- sequential test (CUSUM) per node and model.

-- Each node's test per model: `cusum` in [0, H); when an answer brings it to H the node gets an
-- `impostor` strike and the sum starts again from 0 (flags counts them, flagged_at the last).
-- scored/copied: the node's audited jobs checked token by token, and those checked the weaker
-- way (a copy compared as text: no node able to score the model was online).
CREATE TABLE node_token_evidence (
  node_id     bigint NOT NULL,
  model_id    integer NOT NULL,
  cusum       double precision NOT NULL DEFAULT 0,
  answers     integer NOT NULL DEFAULT 0,
  positions   bigint NOT NULL DEFAULT 0,
  mismatches  bigint NOT NULL DEFAULT 0,
  scored      integer NOT NULL DEFAULT 0,
  copied      integer NOT NULL DEFAULT 0,
  flags       integer NOT NULL DEFAULT 0,
  flagged_at  timestamptz,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (node_id, model_id)
);

-- One row per judged score check: what it found of the audited job. The jobs a flag covers are
-- read from here (those that added evidence since the node's test last started from 0).
CREATE TABLE token_checks (
  check_id      uuid PRIMARY KEY,
  job_id        uuid NOT NULL,
  node_id       bigint NOT NULL,
  model_id      integer NOT NULL,
  checker_id    bigint NOT NULL,
  method        text NOT NULL,
  positions     integer NOT NULL,
  top1          double precision NOT NULL,
  mismatches    integer NOT NULL,
  evidence      double precision NOT NULL,
  cusum         double precision NOT NULL,
  at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX token_checks_node ON token_checks (node_id, model_id, at);

ALTER TABLE node_strikes DROP CONSTRAINT node_strikes_kind_check;
ALTER TABLE node_strikes ADD CONSTRAINT node_strikes_kind_check CHECK (kind IN ('disagreement', 'replay', 'too_fast', 'give_up', 'failure', 'impostor'));
