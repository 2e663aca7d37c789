-- Retention (docs/operations.md, "Retention"; src/retention/): finished jobs' payloads and
-- lease history are deleted after JOB_RETENTION; what exactly-once crediting and the ledger
-- need stays, compactly. And counts the public reads serve that cost the same at any size.

-- A report's body, once past retention, is replaced by its hash: the row itself (job id, node,
-- model, status, points, time) is the ledger's entry and the exactly-once record, and stays.
-- result = 'null' (a JSON null, never a report's result: results are objects) marks a pruned
-- row; result_hash is then SHA-256 of the result's canonical jsonb text, against which a replay
-- is compared (src/results/recorder.ts). An upgrade (error, then success) writes a result
-- object again: a stale hash is then ignored.
ALTER TABLE job_results ADD COLUMN result_hash bytea;
-- The rows whose body is still kept, by time: what retention prunes next, found without a
-- scan of history (pruned rows leave this index).
CREATE INDEX job_results_kept_bodies ON job_results (received_at) WHERE result <> 'null'::jsonb;

-- Open leases per node (the node view, ins node list, the network view): the only index on a
-- node's leases was (node_id, leased_at), which walks all of a node's history to count a few.
CREATE INDEX job_leases_node_open ON job_leases (node_id) WHERE ended_at IS NULL;
-- The dashboard's strikes of the last 24 hours (verify/audit-view.ts): by time, not a walk of
-- every strike ever made.
CREATE INDEX node_strikes_at ON node_strikes (at);

-- Jobs ever, per state: GET /total_job_count reads these rows, never the jobs. Maintained by
-- the statement-level triggers below in the transaction of every write that changes a job's
-- state; retention's deletes change nothing here (the total is of history, not of rows kept).
-- Each backend adds to a shard of its own (its process id modulo 16), so that concurrent
-- writers do not queue behind one row; a read sums at most 16 rows per state. Rows are written
-- in state order; two connections sharing a shard whose transactions write jobs in several
-- statements can still deadlock, which rolls one back and the database layer retries (db/pg.ts).
CREATE TABLE job_counts (
  shard smallint NOT NULL,
  state text NOT NULL,
  jobs  bigint NOT NULL,
  PRIMARY KEY (shard, state)
);
INSERT INTO job_counts (shard, state, jobs) SELECT 0, state, count(*) FROM jobs GROUP BY state;

CREATE FUNCTION job_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO job_counts AS c (shard, state, jobs)
  SELECT pg_backend_pid() % 16, state, count(*) FROM new_jobs GROUP BY state ORDER BY state
  ON CONFLICT (shard, state) DO UPDATE SET jobs = c.jobs + EXCLUDED.jobs;
  RETURN NULL;
END $$;

-- Only states that changed are written: a statement that updates jobs without moving any
-- (progress, a lease renewal) touches no counter row.
CREATE FUNCTION job_counts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO job_counts AS c (shard, state, jobs)
  SELECT pg_backend_pid() % 16, state, sum(n) FROM (
    SELECT state, 1 AS n FROM new_jobs UNION ALL SELECT state, -1 AS n FROM old_jobs) d
  GROUP BY state HAVING sum(n) <> 0 ORDER BY state
  ON CONFLICT (shard, state) DO UPDATE SET jobs = c.jobs + EXCLUDED.jobs;
  RETURN NULL;
END $$;

CREATE TRIGGER job_counts_inserted AFTER INSERT ON jobs
  REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION job_counts_inserted();
CREATE TRIGGER job_counts_updated AFTER UPDATE ON jobs
  REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION job_counts_updated();
