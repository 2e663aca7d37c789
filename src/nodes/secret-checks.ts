// A node's secret checks (node_secret_checks; the statements: nodes/sql/secret-checks.ts): a
// check_node_secret success lets its address register the node once without the key
// (nodes/registration.ts), within REGISTER_AFTER_CHECK_SECONDS.
import type { Queryable } from '../db/database.js';
import { DROP_SPENT, GIVE_BACK, RECORD_CHECK, USE_CHECK } from './sql/secret-checks.js';

/** How long a check_node_secret lets its address register the node without the key (routes/worker/register-node.ts). */
export const REGISTER_AFTER_CHECK_SECONDS = 60;

/** A check_node_secret success: `keyHash` is the hash of the key it proved. */
export async function recordSecretCheck(db: Queryable, nodeId: number, clientAddr: string, keyHash: string, withinSeconds: number): Promise<void> {
  await db.query(RECORD_CHECK, [nodeId, clientAddr, keyHash, withinSeconds]);
}

/** A check's registration taken by useSecretCheck: the key it proved, and when. */
export interface SpentCheck {
  key_hash: string;
  checked_at: Date;
}

/**
 * Uses one registration of the check of this node from this address, if one was made within
 * `withinSeconds` with the node's current key, else undefined. Each check serves one.
 */
export async function useSecretCheck(db: Queryable, nodeId: number, clientAddr: string, withinSeconds: number): Promise<SpentCheck | undefined> {
  const [row] = await db.query<SpentCheck & { uses: number }>(USE_CHECK, [nodeId, clientAddr, withinSeconds]);
  if (row?.uses === 0) await db.query(DROP_SPENT, [nodeId, clientAddr]);
  return row ? { key_hash: row.key_hash, checked_at: new Date(row.checked_at) } : undefined;
}

/** Gives a registration taken by useSecretCheck back to the check it came from (its answer was not delivered). */
export async function giveBackSecretCheck(db: Queryable, nodeId: number, clientAddr: string, check: SpentCheck): Promise<void> {
  await db.query(GIVE_BACK, [nodeId, clientAddr, check.checked_at.toISOString(), check.key_hash]);
}
