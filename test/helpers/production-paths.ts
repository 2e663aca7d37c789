// Shorthands for tests that drive the code paths production uses: a report goes through the
// service's ResultRecorder (batched credit statement, then the existing-row path), daily
// points through a fresh PointsLoader (the full read), unique nodes through a RosterCache.
import { sql, type Database, type Queryable } from '../../src/db/database.js';
import type { NodeRow } from '../../src/repositories/nodes.js';
import { PointsLoader, type DayPoints } from '../../src/repositories/points.js';
import type { RosterCache } from '../../src/repositories/model-roster.js';
import { ResultRecorder, type RecordOutcome, type Report } from '../../src/results/recorder.js';

const recorders = new WeakMap<Database, ResultRecorder>();

/** Records one report as the service does (one recorder per database, so reports may share statements). */
export function recordResult(db: Database, r: Report): Promise<RecordOutcome> {
  let recorder = recorders.get(db);
  if (!recorder) recorders.set(db, (recorder = new ResultRecorder(db)));
  return recorder.record(r);
}

/** The last `lastDays` daily points of a node, read in full (no cached days); undefined: no such node. */
export async function dailyPoints(db: Queryable, nodeName: string, lastDays: number, today?: string): Promise<DayPoints[] | undefined> {
  const json = await new PointsLoader(db, today ? { today: () => today } : {}).loadJson(nodeName, lastDays);
  return json === undefined ? undefined : (JSON.parse(json) as DayPoints[]);
}

/** The names a roster answers unique_nodes with. */
export async function rosterNames(cache: RosterCache, modelName: string, start: string | null, end: string | null): Promise<string[]> {
  return JSON.parse((await cache.uniqueNodesJson(modelName, start, end)).json) as string[];
}

const NODE_BY_NAME = sql('test_node_by_name', 'SELECT id::int AS id, name, disabled_at IS NOT NULL AS disabled FROM nodes WHERE name = $1::text');

export async function findNodeByName(db: Queryable, name: string): Promise<NodeRow | undefined> {
  const [row] = await db.query<NodeRow>(NODE_BY_NAME, [name]);
  return row;
}
