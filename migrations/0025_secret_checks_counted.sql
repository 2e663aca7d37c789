-- A check_node_secret success serves one registration (0008), and each check counts: two workers
-- of one node behind one address (two GPUs behind a NAT, a fleet restarting), each checking its
-- key and then registering without it, both get their session. Before, the second check only
-- renewed the first, and the second registration was refused 401, the check it had just made
-- spent by the other. `uses` is the registrations left; at most 16 are held, and a check after
-- the window (or of another key) starts again at one. The registration that spends the last one
-- deletes the row, as before.
ALTER TABLE node_secret_checks ADD COLUMN uses int NOT NULL DEFAULT 1 CHECK (uses >= 0 AND uses <= 16);
