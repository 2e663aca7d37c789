-- Time stands still for leases while no server sweeps (docs/coordinator.md, "Whose fault an
-- attempt's end is"): when the service is down, or its database is, a node cannot report or
-- renew, so a lease that ran out meanwhile is not its node's failure. The sweep
-- (src/jobs/sql/sweep.ts) records when it last ran; a sweep that finds a longer gap than its
-- interval allows first moves the end of every lease that was open at the last sweep on by the
-- gap (never past its job's deadline), and adds the gap to `paused_seconds`, which the renewal's
-- cap (LEASE_TIMEOUT from the lease's start, src/jobs/sql/progress.ts) allows on top.
CREATE TABLE sweep_clock (
  one      boolean PRIMARY KEY DEFAULT true CHECK (one),
  swept_at timestamptz NOT NULL
);
INSERT INTO sweep_clock (one, swept_at) VALUES (true, now());
ALTER TABLE job_leases ADD COLUMN paused_seconds float8 NOT NULL DEFAULT 0 CHECK (paused_seconds >= 0);
