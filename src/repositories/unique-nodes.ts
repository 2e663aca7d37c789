// Which nodes reported a success for a model with start <= received_at <= end, answered from
// the aggregates. A node qualifies at once when its first or last success for the model lies
// in the window; only a node active both before and after the window is looked at per day
// (model_node_days), and only a day active both before and after the window (the window starts
// and ends inside it) is probed in job_results through its index. So the work grows with the
// number of nodes of the model and days of the window, not with the number of results.
import { sql, type Queryable } from '../db/database.js';

// The sorted names leave the database as one JSON array: the reply embeds it as it is instead
// of parsing thousands of rows into objects and serialising them again.
const UNIQUE_NODES = sql('unique_nodes', `
SELECT count(*)::int AS count, coalesce(json_agg(q.name ORDER BY q.name COLLATE "C"), '[]')::text AS nodes FROM (
SELECT n.name
FROM model_nodes mn
JOIN nodes n ON n.id = mn.node_id
WHERE mn.model_id = (SELECT id FROM models WHERE name = $1::text)
  AND mn.first_success_at <= $3::timestamptz AND mn.last_success_at >= $2::timestamptz
  AND (mn.first_success_at >= $2::timestamptz OR mn.last_success_at <= $3::timestamptz OR EXISTS (
    SELECT 1 FROM model_node_days d
    WHERE d.model_id = mn.model_id AND d.node_id = mn.node_id
      AND d.day BETWEEN ($2::timestamptz AT TIME ZONE 'UTC')::date AND ($3::timestamptz AT TIME ZONE 'UTC')::date
      AND d.first_success_at <= $3::timestamptz AND d.last_success_at >= $2::timestamptz
      AND (d.first_success_at >= $2::timestamptz OR d.last_success_at <= $3::timestamptz OR EXISTS (
        SELECT 1 FROM job_results r
        WHERE r.model_id = mn.model_id AND r.node_id = mn.node_id AND r.status = 'success'
          AND r.received_at BETWEEN $2::timestamptz AND $3::timestamptz))))
) q`);

/** Bounds are ISO-8601 strings (UTC) or null for an open side; `nodes` is a JSON array text. */
export async function uniqueNodesJson(db: Queryable, modelName: string, start: string | null, end: string | null): Promise<{ count: number; nodes: string }> {
  const [row] = await db.query<{ count: number; nodes: string }>(UNIQUE_NODES, [modelName, start ?? '-infinity', end ?? 'infinity']);
  return row!;
}

export async function uniqueNodes(db: Queryable, modelName: string, start: string | null, end: string | null): Promise<string[]> {
  return JSON.parse((await uniqueNodesJson(db, modelName, start, end)).nodes) as string[];
}

export const UNIQUE_NODES_SQL = UNIQUE_NODES;
