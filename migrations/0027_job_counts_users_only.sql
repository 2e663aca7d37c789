-- GET /total_job_count says how many jobs were ever submitted (openapi.json): the jobs
-- applications submitted. Verification's copies and probes (jobs.kind 'verify' and 'probe',
-- src/verify/) are the network checking its nodes, not jobs anyone submitted, and were counted
-- too: with VERIFY on, the count grew past what the users had sent. The counters now count
-- user jobs alone. Copies and probes counted before are taken out where they are still in the
-- table; those retention has already deleted stay in the count (nothing tells them apart now).
CREATE OR REPLACE FUNCTION job_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO job_counts AS c (shard, state, jobs)
  SELECT pg_backend_pid() % 16, state, count(*) FROM new_jobs WHERE kind = 'user' GROUP BY state ORDER BY state
  ON CONFLICT (shard, state) DO UPDATE SET jobs = c.jobs + EXCLUDED.jobs;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION job_counts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO job_counts AS c (shard, state, jobs)
  SELECT pg_backend_pid() % 16, state, sum(n) FROM (
    SELECT state, 1 AS n FROM new_jobs WHERE kind = 'user' UNION ALL SELECT state, -1 AS n FROM old_jobs WHERE kind = 'user') d
  GROUP BY state HAVING sum(n) <> 0 ORDER BY state
  ON CONFLICT (shard, state) DO UPDATE SET jobs = c.jobs + EXCLUDED.jobs;
  RETURN NULL;
END $$;

INSERT INTO job_counts AS c (shard, state, jobs)
SELECT 0, state, -count(*) FROM jobs WHERE kind <> 'user' GROUP BY state ORDER BY state
ON CONFLICT (shard, state) DO UPDATE SET jobs = c.jobs + EXCLUDED.jobs;
