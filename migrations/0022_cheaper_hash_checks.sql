-- The hash columns' checks (64 lowercase hex digits: a key's or token's SHA-256, never the key
-- itself) say the same thing more cheaply. PostgreSQL's regex engine takes about 10 µs to match
-- '^[0-9a-f]{64}$' (its bounded repetition is 64 states), and job_leases checks it twice per job
-- (the lease's insert and its end): 4.5 % of PostgreSQL's CPU in the dispatch cycle
-- (docs/benchmarks.md, "PostgreSQL's CPU by function"). A byte length of 64 and an unbounded
-- class match the same strings at about 0.6 µs.
ALTER TABLE job_leases DROP CONSTRAINT job_leases_key_hash_check,
  ADD CONSTRAINT job_leases_key_hash_check CHECK (octet_length(key_hash) = 64 AND key_hash ~ '^[0-9a-f]*$');
ALTER TABLE node_sessions DROP CONSTRAINT node_sessions_token_hash_check,
  ADD CONSTRAINT node_sessions_token_hash_check CHECK (octet_length(token_hash) = 64 AND token_hash ~ '^[0-9a-f]*$');
ALTER TABLE nodes DROP CONSTRAINT nodes_key_hash_check,
  ADD CONSTRAINT nodes_key_hash_check CHECK (octet_length(key_hash) = 64 AND key_hash ~ '^[0-9a-f]*$');
ALTER TABLE api_keys DROP CONSTRAINT reader_keys_key_hash_check,
  ADD CONSTRAINT api_keys_key_hash_check CHECK (octet_length(key_hash) = 64 AND key_hash ~ '^[0-9a-f]*$');
