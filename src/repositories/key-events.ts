// The channel every key change is announced on, so that key caches (auth/authenticate.ts)
// forget what they hold. A node's changes are announced by the node lifecycle's statements
// themselves, inside their transactions (src/nodes/lifecycle.ts, nodes_announce() of
// migrations/0016_node_lifecycle.sql), a reader or user key's revocation too (nodes/sql/keys.ts).
// The lifecycles of this process on the same
// database hear it synchronously (the database's in-process events, LOCAL_KEY_EVENT, with the
// sender's server id and the item), before the change's command even answers (e.g. a CLI
// command forwarded to the server); other processes hear NOTIFY on KEY_EVENTS_CHANNEL.
export const KEY_EVENTS_CHANNEL = 'ins_keys';
/** In-process: (server id, item) of an announcement (src/nodes/outcome.ts reads the item). */
export const LOCAL_KEY_EVENT = 'key-change';
