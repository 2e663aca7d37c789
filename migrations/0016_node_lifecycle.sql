-- One node lifecycle (src/nodes/states.ts, src/nodes/lifecycle.ts): node add, disable, enable,
-- rotate key, register, deregister, declare models, strike (and suspend) and restore are each
-- one statement under src/nodes/sql/, each announcing what it changed through nodes_announce(),
-- inside its own transaction: the NOTIFY is delivered when (and only if) the change commits, so
-- a server that reloads on hearing it sees the new state, and a change rolled back is never
-- announced.
--
-- An announcement is one item, `<change>:<node id>:<session id>` (ids empty when not
-- applicable), read by src/nodes/outcome.ts; a payload is `<server> <item>`, <server> the
-- sender's id (it skips its own; empty when the statement ran without one). Sent on ins_keys,
-- the channel key caches already listen on: a server that only knows "something changed"
-- (any payload) still clears its caches.
CREATE FUNCTION nodes_announce(server text, change text, node_id bigint, session_id bigint)
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  item text := change || ':' || coalesce(node_id::text, '') || ':' || coalesce(session_id::text, '');
BEGIN
  PERFORM pg_notify('ins_keys', coalesce(server, '') || ' ' || item);
  RETURN item;
END $$;

-- Model names a user key brings into being (submit_job with a name nobody named before) are
-- bounded: at most NEW_MODELS_PER_KEY_PER_DAY per UTC day (src/jobs/submit.ts), counted from
-- the models rows the key created that day. Rows made by workers, reports or imports have no
-- creator and count for nobody.
ALTER TABLE models ADD COLUMN created_by_key bigint;
ALTER TABLE models ADD COLUMN created_at timestamptz;
CREATE INDEX models_created_by_key ON models (created_by_key, created_at) WHERE created_by_key IS NOT NULL;
