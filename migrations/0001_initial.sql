-- Nodes, keys, models, job results and the aggregates the read endpoints are served from.
-- Glossary: a node is a GPU machine with one active node key; a reader key reads any node's
-- points; a job result is one worker report (one row per job_id, exactly-once crediting).

CREATE TABLE nodes (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name        text NOT NULL UNIQUE CHECK (char_length(name) BETWEEN 1 AND 128),
  -- SHA-256 (hex) of the whole key; the key itself is never stored.
  key_hash    text NOT NULL UNIQUE CHECK (key_hash ~ '^[0-9a-f]{64}$'),
  disabled_at timestamptz,
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE reader_keys (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  label      text NOT NULL CHECK (char_length(label) BETWEEN 1 AND 128),
  key_hash   text NOT NULL UNIQUE CHECK (key_hash ~ '^[0-9a-f]{64}$'),
  revoked_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE models (
  id             integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name           text NOT NULL UNIQUE CHECK (char_length(name) BETWEEN 1 AND 256),
  -- NULL: the service's DEFAULT_POINTS_PER_JOB applies.
  points_per_job numeric CHECK (points_per_job >= 0)
);

CREATE TABLE job_results (
  job_id      text PRIMARY KEY CHECK (char_length(job_id) BETWEEN 1 AND 128),
  node_id     bigint NOT NULL REFERENCES nodes (id),
  model_id    integer NOT NULL REFERENCES models (id),
  status      text NOT NULL CHECK (status IN ('success', 'error')),
  result      jsonb NOT NULL,
  points      numeric NOT NULL DEFAULT 0,
  -- When the server received the report that set the current status (server clock, UTC).
  received_at timestamptz NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
-- Probe for unique_nodes when a window starts and ends inside one node's active day.
CREATE INDEX job_results_success_probe ON job_results (model_id, node_id, received_at) WHERE status = 'success';

-- The aggregates below are derived from job_results in the same statement that writes it;
-- they carry no foreign keys (nodes and models are never deleted), which keeps per-report
-- trigger work off the hot path.

-- Points per node per UTC day (daily_points reads only this).
CREATE TABLE node_daily_points (
  node_id bigint NOT NULL,
  day     date NOT NULL,
  points    numeric NOT NULL,
  successes integer NOT NULL,
  PRIMARY KEY (node_id, day)
);

-- First and last success of a node for a model, overall and per UTC day (unique_nodes).
CREATE TABLE model_nodes (
  model_id         integer NOT NULL,
  node_id          bigint NOT NULL,
  first_success_at timestamptz NOT NULL,
  last_success_at  timestamptz NOT NULL,
  PRIMARY KEY (model_id, node_id)
);

CREATE TABLE model_node_days (
  model_id         integer NOT NULL,
  node_id          bigint NOT NULL,
  day              date NOT NULL,
  first_success_at timestamptz NOT NULL,
  last_success_at  timestamptz NOT NULL,
  PRIMARY KEY (model_id, node_id, day)
);
