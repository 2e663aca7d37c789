// Which nodes reported a success for a model with start <= received_at <= end, answered from
// the aggregates. A node qualifies at once when its first or last success for the model lies
// in the window; only a node active both before and after the window is looked at per day
// (model_node_days), and only a day active both before and after the window (the window starts
// and ends inside it) is probed in job_results through its index. So the work grows with the
// number of nodes of the model and days of the window, not with the number of results.
// The service answers most requests from the in-memory rosters of model-roster.ts and uses
// this exact query only for the nodes those cannot decide.
import { sql, type Queryable } from '../db/database.js';

// $1 model name, $2 start, $3 end (timestamptz; ±infinity for open sides).
const EXACT = `
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
          AND r.received_at BETWEEN $2::timestamptz AND $3::timestamptz))))`;

// The sorted names leave the database as one JSON array.
const UNIQUE_NODES = sql('unique_nodes', `
SELECT coalesce(json_agg(q.name ORDER BY q.name COLLATE "C"), '[]')::text AS nodes FROM (SELECT n.name ${EXACT}) q`);

// The same decision for some nodes only ($4).
const UNIQUE_AMONG = sql('unique_nodes_among', `SELECT mn.node_id ${EXACT} AND mn.node_id = ANY($4::bigint[])`);

const bound = (v: string | null, open: string): string => v ?? open;

/** Bounds are ISO-8601 strings (UTC) or null for an open side. */
export async function uniqueNodes(db: Queryable, modelName: string, start: string | null, end: string | null): Promise<string[]> {
  const [row] = await db.query<{ nodes: string }>(UNIQUE_NODES, [modelName, bound(start, '-infinity'), bound(end, 'infinity')]);
  return JSON.parse(row!.nodes) as string[];
}

/** Of `nodeIds`, those that reported a success for the model in the window. */
export async function uniqueNodesAmong(db: Queryable, modelName: string, start: string | null, end: string | null, nodeIds: number[]): Promise<Set<number>> {
  const rows = await db.query<{ node_id: number }>(UNIQUE_AMONG, [modelName, bound(start, '-infinity'), bound(end, 'infinity'), nodeIds]);
  return new Set(rows.map((r) => Number(r.node_id)));
}

export const UNIQUE_NODES_SQL = UNIQUE_NODES;
