// A snapshot of everything the service stores, to assert that a rejected request changed
// nothing.
import { sql, type Database } from '../../src/db/database.js';

const TABLES = [
  'nodes',
  'api_keys',
  'models',
  'job_results',
  'node_daily_points',
  'model_nodes',
  'model_node_days',
  'points_history',
  'node_sessions',
  'node_secret_checks',
  'jobs',
  'job_leases',
];
// Written in the background, not by the request itself (jobs/presence.ts).
const BACKGROUND: Record<string, string> = { node_sessions: 'last_seen_at' };

export async function snapshot(db: Database): Promise<Record<string, unknown[]>> {
  const out: Record<string, unknown[]> = {};
  for (const t of TABLES) {
    // Table names come from the constant list above, never from input.
    const row = BACKGROUND[t] ? `to_jsonb(x) - '${BACKGROUND[t]}'` : 'to_jsonb(x)';
    out[t] = await db.query(sql(`snapshot_${t}`, `SELECT (${row})::text AS row FROM ${t} x ORDER BY 1`));
  }
  return out;
}

export async function totalPoints(db: Database): Promise<number> {
  const [row] = await db.query<{ p: number }>(sql('test_total_points', 'SELECT coalesce(sum(points), 0)::float8 AS p FROM node_daily_points'));
  return row!.p;
}
