-- `ins import results` on the embedded database (PGlite) stored each result as a JSON string
-- ("{\"message\": …}") rather than the object it holds (src/import/staging.ts, fixed with this
-- migration): a worker re-sending an imported report then met a different body, 409 instead of
-- a replay. Every result written otherwise is an object (or JSON null once retention has hashed
-- it), so a string is such an import's, and is replaced by the JSON it holds. A row retention
-- has already pruned keeps the hash of the string (its body is gone, and the string's exact text
-- with it): a re-send of that report still meets a different hash, 409 rather than a replay.
UPDATE job_results SET result = (result #>> '{}')::jsonb WHERE jsonb_typeof(result) = 'string';
