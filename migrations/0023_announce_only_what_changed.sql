-- jobs_announce (0007_job_lifecycle.sql, where its items are described) builds only the parts
-- it has input for. It built all four in one query on every call, and every job statement calls
-- it: a hand-off at submission announces nothing, a completion only finished jobs. PL/pgSQL
-- answers the cardinality tests without starting the executor, so a call with nothing to say runs
-- no query at all, and a completion one small query instead of four subqueries (the function was
-- 4.4 % of PostgreSQL's CPU in the dispatch cycle: docs/benchmarks.md). Same items, same order,
-- same payloads.
CREATE OR REPLACE FUNCTION jobs_announce(server text, queued int[], copies int[], finished_ids uuid[], finished_states text[], finished_models int[], ended_ids uuid[], ended_attempts int[])
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  items text[] := '{}';
  n integer;
BEGIN
  IF cardinality(queued) > 0 THEN
    items := items || ARRAY(SELECT 'q:' || m || ':' || count(*) FROM unnest(queued) AS m GROUP BY m ORDER BY m);
  END IF;
  IF cardinality(copies) > 0 THEN
    items := items || ARRAY(SELECT 'c:' || m || ':' || count(*) FROM unnest(copies) AS m GROUP BY m ORDER BY m);
  END IF;
  IF cardinality(finished_ids) > 0 THEN
    items := items || ARRAY(SELECT 'f:' || f.id || ':' || f.state || ':' || f.model FROM unnest(finished_ids, finished_states, finished_models) AS f(id, state, model));
  END IF;
  IF cardinality(ended_ids) > 0 THEN
    items := items || ARRAY(SELECT 'e:' || e.id || ':' || e.attempt FROM unnest(ended_ids, ended_attempts) AS e(id, attempt));
  END IF;
  n := cardinality(items);
  FOR i IN 0 .. n - 1 BY 100 LOOP
    PERFORM pg_notify('ins_jobs', server || ' ' || array_to_string(items[i + 1 : i + 100], ','));
  END LOOP;
  RETURN array_to_string(items, ',');
END $$;
