// Tells every running server that keys or node statuses changed, so the key caches
// (auth/cache.ts) forget what they hold. Sent after the change committed, so a server that
// reloads sees the new state. Caches of this process hear it synchronously, before the
// change's command even answers (e.g. a CLI command forwarded to the server); other
// processes hear NOTIFY on KEY_EVENTS_CHANNEL.
import { sql, type Queryable } from '../db/database.js';

export const KEY_EVENTS_CHANNEL = 'ins_keys';

const NOTIFY = sql('key_events_notify', `SELECT pg_notify('${KEY_EVENTS_CHANNEL}', '') AS sent`);

const localListeners = new Set<() => void>();

/** Calls fn on every key change made in this process; returns the unsubscribe function. */
export function onLocalKeyChange(fn: () => void): () => void {
  localListeners.add(fn);
  return () => localListeners.delete(fn);
}

export async function announceKeyChange(db: Queryable): Promise<void> {
  for (const fn of localListeners) fn();
  await db.query(NOTIFY);
}
