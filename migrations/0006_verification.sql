-- Verification (docs/verification.md): some jobs are run again by other nodes and the answers
-- compared; every answer is checked for replays and implausible speed; strikes move a node
-- from trusted to probation to suspended (src/verify/standing.ts), and a suspension reverses
-- its recent points as ledger entries.

-- System jobs: probes the coordinator makes up (no owner: nobody reads them) and copies of a
-- job run by other nodes (verify_of: the job they check; exclude_nodes: the nodes that ran it).
ALTER TABLE jobs ALTER COLUMN owner_key_id DROP NOT NULL;
ALTER TABLE jobs ADD COLUMN kind text NOT NULL DEFAULT 'user' CHECK (kind IN ('user', 'probe', 'verify'));
ALTER TABLE jobs ADD COLUMN verify_of uuid;
ALTER TABLE jobs ADD COLUMN exclude_nodes bigint[] NOT NULL DEFAULT '{}';
-- A copy made because the original's answer looked replayed: the evidence, for the strike.
ALTER TABLE jobs ADD COLUMN suspicion jsonb;
-- Done jobs waiting for the auditor (src/verify/auditor.ts): the statement that finishes a job
-- adds it, the audit that checks it takes it out. A queue of its own, so that a job's row is
-- not written once more (with all its indexes) to say it was checked.
CREATE TABLE job_audits (
  job_id      uuid PRIMARY KEY,
  finished_at timestamptz NOT NULL
);
-- Copies are dispatched apart from the rest: first, and never to a node that ran the job.
DROP INDEX jobs_queued;
CREATE INDEX jobs_queued ON jobs (model_id, submitted_at, id) WHERE state = 'queued' AND verify_of IS NULL;
CREATE INDEX jobs_verify_queued ON jobs (model_id, submitted_at, id) WHERE state = 'queued' AND verify_of IS NOT NULL;
CREATE INDEX jobs_verify_of ON jobs (verify_of) WHERE verify_of IS NOT NULL;
-- The network's view: how many jobs of each kind lately.
CREATE INDEX jobs_kind_submitted ON jobs (submitted_at) WHERE kind <> 'user';

-- A result can be reversed (fake work): it then counts nowhere, and a repeat of its report is
-- never credited again.
ALTER TABLE job_results DROP CONSTRAINT job_results_status_check;
ALTER TABLE job_results ADD CONSTRAINT job_results_status_check CHECK (status IN ('success', 'error', 'reversed'));
-- A node's successes by time: what a suspension reverses.
CREATE INDEX job_results_node_success ON job_results (node_id, received_at) WHERE status = 'success';

-- The ledger of reversals: each reversed result once (its job id is the key), with the points
-- taken back from the day they were credited to.
CREATE TABLE point_reversals (
  job_id      text PRIMARY KEY,
  node_id     bigint NOT NULL,
  model_id    integer NOT NULL,
  points      numeric NOT NULL,
  day         date NOT NULL,
  reason      text NOT NULL,
  reversed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX point_reversals_node ON point_reversals (node_id, reversed_at);

-- Each judged node's standing (nodes without a row are trusted).
CREATE TABLE node_standing (
  node_id       bigint PRIMARY KEY,
  state         text NOT NULL DEFAULT 'trusted' CHECK (state IN ('trusted', 'probation', 'suspended')),
  agreements    integer NOT NULL DEFAULT 0,
  -- Agreements since the last strike: enough of them end a probation.
  clean_streak  integer NOT NULL DEFAULT 0,
  changed_at    timestamptz NOT NULL DEFAULT now(),
  -- Strikes before this count no more (an operator reinstated the node).
  reinstated_at timestamptz
);
CREATE INDEX node_standing_suspended ON node_standing (node_id) WHERE state = 'suspended';

-- The evidence: every strike with what caused it.
CREATE TABLE node_strikes (
  id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  node_id  bigint NOT NULL,
  job_id   uuid NOT NULL,
  kind     text NOT NULL CHECK (kind IN ('disagreement', 'replay', 'too_fast')),
  evidence jsonb NOT NULL,
  at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX node_strikes_node ON node_strikes (node_id, at);

-- Each node's recent answers, for replay detection: fingerprints, never the text. answer_hash
-- is the normalised answer's hash, simhash its 64-bit SimHash; two SimHashes within 3 bits
-- share one of their four 16-bit bands, so the four band indexes find near copies.
CREATE TABLE node_answers (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  node_id     bigint NOT NULL,
  job_id      uuid NOT NULL,
  prompt_hash bigint NOT NULL,
  answer_hash bigint NOT NULL,
  simhash     bigint NOT NULL,
  at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX node_answers_band0 ON node_answers (node_id, (simhash & 65535));
CREATE INDEX node_answers_band1 ON node_answers (node_id, ((simhash >> 16) & 65535));
CREATE INDEX node_answers_band2 ON node_answers (node_id, ((simhash >> 32) & 65535));
CREATE INDEX node_answers_band3 ON node_answers (node_id, ((simhash >> 48) & 65535));
-- The same answer from several nodes is a stock answer (a refusal template), not a replay.
CREATE INDEX node_answers_answer ON node_answers (answer_hash);
