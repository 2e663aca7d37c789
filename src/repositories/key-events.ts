// Tells every running server that keys or node statuses changed (auth-cache.ts clears its
// cache on it). Sent after the change committed, so a server that reloads sees the new state.
import { sql, type Queryable } from '../db/database.js';
import { invalidateLocalCaches, KEY_EVENTS_CHANNEL } from '../auth-cache.js';

const NOTIFY = sql('key_events_notify', `SELECT pg_notify('${KEY_EVENTS_CHANNEL}', '') AS sent`);

export async function announceKeyChange(db: Queryable): Promise<void> {
  invalidateLocalCaches();
  await db.query(NOTIFY);
}
