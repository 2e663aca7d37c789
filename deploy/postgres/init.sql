-- Run once when deploy/compose.yaml creates the database. Through PgBouncer in transaction mode
-- the servers cannot set anything per connection: their transactions set the statement timeout
-- and JIT themselves, single statements run with these database defaults
-- (docs/operations.md, "Behind PgBouncer").
ALTER DATABASE ins SET statement_timeout = '15s';
ALTER DATABASE ins SET jit = off;
