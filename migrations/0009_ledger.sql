-- The points ledger (docs/ledger.md): each UTC day, once it ended and the window in which
-- verification may still reverse its credits has passed, closes into a signed record: the
-- Merkle root of its entries (every credit received that day, every reversal of that day),
-- per-node totals, the previous day's root. Entries are not copied: they are recomputed from
-- job_results and point_reversals, so a row changed after closing shows as a mismatch.
--
-- A change of meaning: point_reversals.day (0006) is the reversal's ledger day: the day of the
-- credit it takes back while that day is open, else the day the reversal is made; the
-- node_daily_points row it lowers is that day's, so a closed day's points never change.

-- Every day up to closed_through is closed, and never changes again. The reversal statement
-- (src/verify/reversal.ts) and the import of history read it FOR SHARE, the close takes it FOR
-- UPDATE: a reversal or import either commits before a close re-counts its day, or sees that
-- day closed. claimed_by/claimed_until: the server computing the next day (others skip it).
CREATE TABLE ledger_state (
  only_row       boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  closed_through date,
  claimed_by     text,
  claimed_until  timestamptz
);
INSERT INTO ledger_state DEFAULT VALUES;

-- The Ed25519 key that signs the days: generated on first start (private_pem here), or kept in
-- LEDGER_KEY_FILE by the servers (private_pem NULL; the public key still recorded, so that a
-- server with another key file refuses to start rather than sign a second chain).
CREATE TABLE ledger_key (
  only_row    boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  key_id      text NOT NULL,
  public_key  bytea NOT NULL CHECK (length(public_key) = 32),
  private_pem text,
  created_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per closed day: what was signed.
CREATE TABLE ledger_days (
  day           date PRIMARY KEY,
  root          bytea NOT NULL CHECK (length(root) = 32),
  previous_root bytea NOT NULL CHECK (length(previous_root) = 32),
  nodes         integer NOT NULL,
  entries       bigint NOT NULL,
  credits       bigint NOT NULL,
  credited      numeric NOT NULL,
  reversals     bigint NOT NULL,
  reversed      numeric NOT NULL,
  key_id        text NOT NULL,
  signature     bytea NOT NULL CHECK (length(signature) = 64),
  closed_at     timestamptz NOT NULL DEFAULT now()
);

-- Each node with entries on a closed day: its leaf of the day's tree (position: by name),
-- its totals, the root of its entries and their digests (the first 8 bytes of each entry's
-- leaf hash, in order: 8 bytes per entry, which let a check name the entry that changed).
CREATE TABLE ledger_day_nodes (
  day          date NOT NULL,
  position     integer NOT NULL,
  node_id      bigint NOT NULL,
  name         text NOT NULL,
  credits      bigint NOT NULL,
  credited     numeric NOT NULL,
  reversals    bigint NOT NULL,
  reversed     numeric NOT NULL,
  entries_root bytea NOT NULL CHECK (length(entries_root) = 32),
  digests_hash bytea NOT NULL CHECK (length(digests_hash) = 32),
  digests      bytea NOT NULL,
  PRIMARY KEY (day, position)
);
CREATE UNIQUE INDEX ledger_day_nodes_name ON ledger_day_nodes (day, name);

-- The nodes of a day being computed, written as they are done (a day's digests are 8 bytes
-- per entry: not held in memory), moved to ledger_day_nodes by the transaction that closes it.
CREATE TABLE ledger_pending_nodes (LIKE ledger_day_nodes, server text NOT NULL);
CREATE INDEX ledger_pending_nodes_day ON ledger_pending_nodes (day, server);

-- A day's entries, per node: credits reversed since (successes are in job_results_node_success),
-- reversals by the day they belong to, and the days with points (the first day of the ledger).
-- None of these is written by a report's hot path but the last, once per node and day.
CREATE INDEX job_results_node_reversed ON job_results (node_id, received_at) WHERE status = 'reversed';
CREATE INDEX point_reversals_day ON point_reversals (day, node_id);
CREATE INDEX node_daily_points_day ON node_daily_points (day);
