// Each server keeps, per model, the roster of nodes that served it: first and last success,
// in the database's name order. It answers unique_nodes without a database scan and stays
// exact, also with several servers writing:
// - a node's first success never changes, except by an import or an explicit time, and
//   those bump models.roster_version like a node that is new to the model does;
// - a node's last success only grows, so the cached one is a lower bound.
// Hence a node is in the window when its first or cached last success lies in it, and out
// when its first success is after it. The others — active before the window, and either not
// since (as far as the roster knows) or still after it — are decided by the exact query for
// just those nodes. Each request reads the roster version (one indexed row) and reloads the
// roster when it changed, so a node that just reported its first success is seen at once.
import { sql, type Queryable } from '../db/database.js';
import { uniqueNodesAmong } from './unique-nodes.js';
import { instantKey } from '../validation/datetime.js';

interface Entry { nodeId: number; name: string; first: string; last: string }
interface Roster { version: string; loadedAt: number; entries: Entry[] }

const VERSION = sql('roster_version', 'SELECT id, roster_version::text AS version FROM models WHERE name = $1::text');
// Times as fixed-width UTC text: they compare as instants, at microsecond precision.
const ROSTER = sql('roster_load', `SELECT mn.node_id::int AS "nodeId", n.name,
    to_char(mn.first_success_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS first,
    to_char(mn.last_success_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS last
  FROM model_nodes mn JOIN nodes n ON n.id = mn.node_id
  WHERE mn.model_id = $1::integer ORDER BY n.name COLLATE "C"`);

export class RosterCache {
  private readonly rosters = new Map<string, Roster>();

  /** maxAgeMs: how stale last successes may get before a reload (fewer nodes left undecided). */
  constructor(private readonly maxAgeMs = 2_000, private readonly maxModels = 1_000) {}

  private async roster(db: Queryable, modelName: string): Promise<Roster | undefined> {
    const [model] = await db.query<{ id: number; version: string }>(VERSION, [modelName]);
    if (!model) return undefined;
    const cached = this.rosters.get(modelName);
    if (cached && cached.version === model.version && Date.now() - cached.loadedAt <= this.maxAgeMs) return cached;
    const roster = { version: model.version, loadedAt: Date.now(), entries: await db.query<Entry>(ROSTER, [model.id]) };
    if (!cached && this.rosters.size >= this.maxModels) this.rosters.delete(this.rosters.keys().next().value!);
    this.rosters.set(modelName, roster);
    return roster;
  }

  /** The names of the nodes with a success in [start, end] (ISO UTC, null = open), sorted. */
  async uniqueNodes(db: Queryable, modelName: string, start: string | null, end: string | null): Promise<string[]> {
    const roster = await this.roster(db, modelName);
    if (!roster) return [];
    const s = start === null ? '' : instantKey(start);
    const e = end === null ? '\uffff' : instantKey(end);
    const inside = new Set<number>();
    const undecided: number[] = [];
    for (const n of roster.entries) {
      if (n.first > e) continue;
      if (n.first >= s || (n.last >= s && n.last <= e)) inside.add(n.nodeId);
      else undecided.push(n.nodeId);
    }
    if (undecided.length > 0) {
      for (const id of await uniqueNodesAmong(db, modelName, start, end, undecided)) inside.add(id);
    }
    return roster.entries.filter((n) => inside.has(n.nodeId)).map((n) => n.name);
  }
}
