-- The coordinator (docs/coordinator.md): users submit jobs, nodes lease and run them, results
-- come back and are credited once. Job states: src/jobs/states.ts (the diagram).

-- Reader keys and user keys (uk_, submit jobs and read their own results) in one table.
ALTER TABLE reader_keys RENAME TO api_keys;
ALTER TABLE api_keys ADD COLUMN kind text NOT NULL DEFAULT 'reader' CHECK (kind IN ('reader', 'user'));

-- A worker's session: register_node hands out a token (ns_, only its hash is kept) that the
-- worker sends on every later call. It ends when the worker deregisters; it is void once the
-- node's key changes (node_key_hash no longer matches) or the node is disabled.
CREATE TABLE node_sessions (
  id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  node_id            bigint NOT NULL,
  token_hash         text NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
  node_key_hash      text NOT NULL,
  node_version       text NOT NULL DEFAULT '',
  stats              jsonb NOT NULL DEFAULT '{}',
  -- Most jobs the session holds at once (the real worker runs one at a time).
  capacity           integer NOT NULL DEFAULT 1 CHECK (capacity BETWEEN 1 AND 64),
  -- The models it declared (update_models), and when; a declaration older than MODELS_TTL lapses.
  models             integer[] NOT NULL DEFAULT '{}',
  models_declared_at timestamptz,
  started_at         timestamptz NOT NULL DEFAULT now(),
  last_seen_at       timestamptz NOT NULL DEFAULT now(),
  ended_at           timestamptz
);
CREATE INDEX node_sessions_live ON node_sessions (node_id) WHERE ended_at IS NULL;

-- Unchanged workers prove their key with check_node_secret, then register without one: a
-- successful check from an address lets that address register the node for a short while.
CREATE TABLE node_secret_checks (
  node_id     bigint NOT NULL,
  client_addr text NOT NULL,
  checked_at  timestamptz NOT NULL,
  PRIMARY KEY (node_id, client_addr)
);

CREATE TABLE jobs (
  id               uuid PRIMARY KEY,
  -- The user key that submitted it; only that key reads it.
  owner_key_id     bigint NOT NULL,
  model_id         integer NOT NULL,
  state            text NOT NULL CHECK (state IN ('queued', 'leased', 'done', 'failed', 'expired', 'canceled')),
  -- What the node gets: {"messages": [...], "max_output": n, "temperature": t}.
  request          jsonb NOT NULL,
  -- Leases handed out so far (the current one included).
  attempts         integer NOT NULL DEFAULT 0,
  submitted_at     timestamptz NOT NULL DEFAULT now(),
  -- When a node first got it: the job's wait in the queue.
  first_leased_at  timestamptz,
  deadline_at      timestamptz NOT NULL,
  -- While leased: the holder and the lease's end; once done: the node that did it.
  node_id          bigint,
  lease_expires_at timestamptz,
  finished_at      timestamptz,
  -- Once done: the answer {"message": {"role", "content"}} and the node's usage, if it sent one.
  result           jsonb,
  usage            jsonb,
  -- Why a job failed, expired or was canceled.
  detail           text
);
-- Dispatch: the oldest queued job of the node's models.
CREATE INDEX jobs_queued ON jobs (model_id, submitted_at, id) WHERE state = 'queued';
-- The sweeper: open jobs past their deadline (and open leases past their end, below).
CREATE INDEX jobs_open_deadline ON jobs (deadline_at) WHERE state IN ('queued', 'leased');
-- The network's view: recent completions, jobs per minute.
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;

-- Every lease of a job (its attempts): which node had it, from when to when, and how it ended.
-- The job key (jk_) sent with the lease is looked up by its hash; it names job, node and
-- attempt, and is worthless once the lease ended (but for replaying the same report).
CREATE TABLE job_leases (
  key_hash   text PRIMARY KEY CHECK (key_hash ~ '^[0-9a-f]{64}$'),
  job_id     uuid NOT NULL,
  attempt    integer NOT NULL,
  node_id    bigint NOT NULL,
  session_id bigint NOT NULL,
  leased_at  timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  ended_at   timestamptz,
  outcome    text CHECK (outcome IN ('done', 'error', 'expired', 'released', 'abandoned', 'deadline')),
  UNIQUE (job_id, attempt)
);
CREATE INDEX job_leases_open ON job_leases (session_id) WHERE ended_at IS NULL;
CREATE INDEX job_leases_expiry ON job_leases (expires_at) WHERE ended_at IS NULL;
-- A node's last jobs (its operator's view).
CREATE INDEX job_leases_node ON job_leases (node_id, leased_at);
