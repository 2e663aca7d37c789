// Which nodes reported a success for a model with start <= received_at <= end, answered from
// the aggregates. A node qualifies at once when its first or last success for the model lies
// in the window; only a node active both before and after the window is looked at per day
// (model_node_days), and only a day active both before and after the window (the window starts
// and ends inside it) is probed in job_results through its index. So the work grows with the
// number of nodes of the model and days of the window, not with the number of results.
// The service answers from the in-memory rosters of model-roster.ts and uses this exact
// decision only for the nodes those cannot decide (ROSTER_CHECK).
import { sql, type Queryable } from '../db/database.js';

/** The exact decision for model_nodes row `mn`, window [s, e] given as SQL timestamptz expressions. */
const inWindow = (s: string, e: string) => `
  mn.first_success_at <= ${e} AND mn.last_success_at >= ${s}
  AND (mn.first_success_at >= ${s} OR mn.last_success_at <= ${e} OR EXISTS (
    SELECT 1 FROM model_node_days d
    WHERE d.model_id = mn.model_id AND d.node_id = mn.node_id
      AND d.day BETWEEN (${s} AT TIME ZONE 'UTC')::date AND (${e} AT TIME ZONE 'UTC')::date
      AND d.first_success_at <= ${e} AND d.last_success_at >= ${s}
      AND (d.first_success_at >= ${s} OR d.last_success_at <= ${e} OR EXISTS (
        SELECT 1 FROM job_results r
        WHERE r.model_id = mn.model_id AND r.node_id = mn.node_id AND r.status = 'success'
          AND r.received_at BETWEEN ${s} AND ${e}))))`;

// $1 model name, $2 start, $3 end (timestamptz; ±infinity for open sides). The sorted names
// leave the database as one JSON array.
export const UNIQUE_NODES = sql(
  'unique_nodes',
  `
SELECT coalesce(json_agg(q.name ORDER BY q.name COLLATE "C"), '[]')::text AS nodes FROM (
  SELECT n.name FROM model_nodes mn JOIN nodes n ON n.id = mn.node_id
  WHERE mn.model_id = (SELECT id FROM models WHERE name = $1::text)
    AND ${inWindow('$2::timestamptz', '$3::timestamptz')}) q`,
);

// For many requests at once (db/batcher.ts): each model's id and roster version, and which of
// the given nodes ($4, as array literals) are in that request's window. $1 model names, $2
// starts, $3 ends. The version is read in the same snapshot as the decision.
export const ROSTER_CHECK = sql(
  'roster_check',
  `SELECT q.i::int AS i, m.id, m.roster_version::text AS version,
    CASE WHEN m.id IS NOT NULL AND q.nodes <> '{}' THEN ARRAY(
      SELECT mn.node_id::int FROM model_nodes mn
      WHERE mn.model_id = m.id AND mn.node_id = ANY(q.nodes::bigint[]) AND ${inWindow('q.s', 'q.e')}) END AS found
  FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[]) WITH ORDINALITY AS q(name, s, e, nodes, i)
  LEFT JOIN models m ON m.name = q.name`,
);

export const bound = (v: string | null, open: string): string => v ?? open;

/** Bounds are ISO-8601 strings (UTC) or null for an open side. */
export async function uniqueNodes(db: Queryable, modelName: string, start: string | null, end: string | null): Promise<string[]> {
  const [row] = await db.query<{ nodes: string }>(UNIQUE_NODES, [modelName, bound(start, '-infinity'), bound(end, 'infinity')]);
  return JSON.parse(row!.nodes) as string[];
}
