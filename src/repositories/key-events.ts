// Tells every running server that keys or node statuses changed, so the key caches
// (auth/authenticate.ts) forget what they hold. Sent after the change committed, so a server
// that reloads sees the new state. Caches of this process on the same database hear it
// synchronously (the database's in-process events), before the change's command even answers
// (e.g. a CLI command forwarded to the server); other processes hear NOTIFY on
// KEY_EVENTS_CHANNEL.
import { sql, type Database } from '../db/database.js';

export const KEY_EVENTS_CHANNEL = 'ins_keys';
const LOCAL_EVENT = 'key-change';

const NOTIFY = sql('key_events_notify', `SELECT pg_notify('${KEY_EVENTS_CHANNEL}', '') AS sent`);

/** Calls fn on every key change made in this process on this database; returns the unsubscribe function. */
export function onLocalKeyChange(db: Database, fn: () => void): () => void {
  db.events.on(LOCAL_EVENT, fn);
  return () => db.events.off(LOCAL_EVENT, fn);
}

export async function announceKeyChange(db: Database): Promise<void> {
  db.events.emit(LOCAL_EVENT);
  await db.query(NOTIFY);
}
