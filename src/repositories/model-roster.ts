// Each server keeps, per model, the roster of nodes that served it: first and last success,
// in the database's name order. It answers unique_nodes mostly without a database scan and
// stays exact, also with several servers writing, because models.roster_version is bumped
// in the same statement as every write that could fool it:
// - a node's first success of a UTC day for the model (which includes its first ever), and
// - a success at an explicit time (imports), which may be anywhere in the past.
// So while the version is the one a roster was loaded with, a node's first success is exact,
// its cached last success is a lower bound, and any success since the load fell on a day on
// which the node already had one — no later than the day of its cached last success.
// Hence, for a window [s, e], a node is
// - out when its first success is after e;
// - in when its first success, or its cached last success, lies in the window;
// - out when its cached last success is on a day before the day of s: nothing it did since
//   can be in the window;
// - otherwise undecided — its last success is on the day of s but before s, or it was active
//   before and after the window — and the exact query decides, for those nodes only.
// Each request reads the version (one indexed row, shared by concurrent requests) and the
// roster reloads once when it changed or is older than maxAgeMs (fresher last successes
// leave fewer nodes undecided).
import { sql, type Queryable } from '../db/database.js';
import { Batcher } from '../db/batcher.js';
import { uniqueNodesAmong } from './unique-nodes.js';
import { instantKey } from '../validation/datetime.js';

const DAY_MS = 86_400_000;

/** Nodes in name order, as parallel arrays; instants as whole ms plus the microseconds beyond. */
interface Roster {
  version: string;
  loadedAt: number;
  nodeIds: number[];
  names: string[];
  /** Each name as a JSON string literal, to write answers without serialising again. */
  json: string[];
  firstMs: Float64Array;
  firstUs: Uint16Array;
  lastMs: Float64Array;
  lastUs: Uint16Array;
}

const VERSIONS = sql('roster_versions', 'SELECT name, id, roster_version::text AS version FROM models WHERE name = ANY($1::text[])');
const ROSTER = sql('roster_load', `SELECT mn.node_id::int AS "nodeId", n.name,
    (extract(epoch FROM date_trunc('milliseconds', mn.first_success_at)) * 1000)::float8 AS "firstMs",
    (extract(microseconds FROM mn.first_success_at)::int % 1000) AS "firstUs",
    (extract(epoch FROM date_trunc('milliseconds', mn.last_success_at)) * 1000)::float8 AS "lastMs",
    (extract(microseconds FROM mn.last_success_at)::int % 1000) AS "lastUs"
  FROM model_nodes mn JOIN nodes n ON n.id = mn.node_id
  WHERE mn.model_id = $1::integer ORDER BY n.name COLLATE "C"`);

interface Row { nodeId: number; name: string; firstMs: number; firstUs: number; lastMs: number; lastUs: number }
interface Model { id: number; version: string }

/** An instant bound (ISO UTC) as ms + µs; null = open. */
function bound(iso: string | null, open: number): [number, number] {
  if (iso === null) return [open, 0];
  const key = instantKey(iso); // YYYY-MM-DDTHH:MM:SS.ffffffZ
  return [Date.parse(`${key.slice(0, 23)}Z`), Number(key.slice(23, 26))];
}

export interface RosterOptions {
  /** How stale last successes may get before a reload (fewer nodes left undecided). */
  maxAgeMs?: number;
  maxModels?: number;
}

export class RosterCache {
  private readonly rosters = new Map<string, Roster>();
  private readonly loading = new Map<string, Promise<Roster>>();
  private readonly versions: Batcher<string, Model | undefined>;
  private readonly maxAgeMs: number;
  private readonly maxModels: number;

  constructor(private readonly db: Queryable, opts: RosterOptions = {}) {
    this.maxAgeMs = opts.maxAgeMs ?? 2_000;
    this.maxModels = opts.maxModels ?? 1_000;
    this.versions = new Batcher(async (names) => {
      const rows = await db.query<{ name: string } & Model>(VERSIONS, [names]);
      const byName = new Map(rows.map((r) => [r.name, { id: r.id, version: r.version }]));
      return names.map((n) => byName.get(n));
    }, { maxBatch: 64, maxInFlight: 2 });
  }

  private async roster(modelName: string): Promise<Roster | undefined> {
    const model = await this.versions.load(modelName);
    if (!model) return undefined;
    const cached = this.rosters.get(modelName);
    if (cached && cached.version === model.version && Date.now() - cached.loadedAt <= this.maxAgeMs) return cached;
    // One reload at a time per model; requests that need a newer version than the one being
    // loaded wait for it, then load again.
    const pending = this.loading.get(modelName);
    if (pending) {
      const r = await pending;
      if (BigInt(r.version) >= BigInt(model.version)) return r;
    }
    return this.reload(modelName, model);
  }

  private reload(modelName: string, model: Model): Promise<Roster> {
    const p = (async () => {
      const loadedAt = Date.now();
      const rows = await this.db.query<Row>(ROSTER, [model.id]);
      const r: Roster = {
        version: model.version,
        loadedAt,
        nodeIds: rows.map((x) => Number(x.nodeId)),
        names: rows.map((x) => x.name),
        json: rows.map((x) => JSON.stringify(x.name)),
        firstMs: Float64Array.from(rows, (x) => x.firstMs),
        firstUs: Uint16Array.from(rows, (x) => x.firstUs),
        lastMs: Float64Array.from(rows, (x) => x.lastMs),
        lastUs: Uint16Array.from(rows, (x) => x.lastUs),
      };
      if (!this.rosters.has(modelName) && this.rosters.size >= this.maxModels) this.rosters.delete(this.rosters.keys().next().value!);
      this.rosters.set(modelName, r);
      return r;
    })();
    this.loading.set(modelName, p);
    const done = () => { if (this.loading.get(modelName) === p) this.loading.delete(modelName); };
    p.then(done, done);
    return p;
  }

  /** Indexes (in name order) of the nodes with a success in [start, end] (ISO UTC, null = open). */
  private async inside(modelName: string, start: string | null, end: string | null): Promise<[Roster | undefined, number[]]> {
    const r = await this.roster(modelName);
    if (!r) return [undefined, []];
    const [sMs, sUs] = bound(start, -Infinity);
    const [eMs, eUs] = bound(end, Infinity);
    const sDay = Math.floor(sMs / DAY_MS);
    const n = r.names.length;
    // 1 in, 0 out, 2 undecided.
    const state = new Uint8Array(n);
    const undecided: number[] = [];
    for (let i = 0; i < n; i++) {
      const fMs = r.firstMs[i]!;
      const lMs = r.lastMs[i]!;
      const firstAfterEnd = fMs > eMs || (fMs === eMs && r.firstUs[i]! > eUs);
      if (firstAfterEnd) continue;
      const firstFromStart = fMs > sMs || (fMs === sMs && r.firstUs[i]! >= sUs);
      const lastFromStart = lMs > sMs || (lMs === sMs && r.lastUs[i]! >= sUs);
      const lastToEnd = lMs < eMs || (lMs === eMs && r.lastUs[i]! <= eUs);
      if (firstFromStart || (lastFromStart && lastToEnd)) state[i] = 1;
      else if (!lastFromStart && Math.floor(lMs / DAY_MS) < sDay) continue;
      else {
        state[i] = 2;
        undecided.push(r.nodeIds[i]!);
      }
    }
    if (undecided.length > 0) {
      const found = await uniqueNodesAmong(this.db, modelName, start, end, undecided);
      for (let i = 0; i < n; i++) if (state[i] === 2) state[i] = found.has(r.nodeIds[i]!) ? 1 : 0;
    }
    const out: number[] = [];
    for (let i = 0; i < n; i++) if (state[i] === 1) out.push(i);
    return [r, out];
  }

  /** The names of the nodes with a success in [start, end] (ISO UTC, null = open), sorted. */
  async uniqueNodes(modelName: string, start: string | null, end: string | null): Promise<string[]> {
    const [r, idx] = await this.inside(modelName, start, end);
    return r ? idx.map((i) => r.names[i]!) : [];
  }

  /** The same as a JSON array text, and its length. */
  async uniqueNodesJson(modelName: string, start: string | null, end: string | null): Promise<{ count: number; json: string }> {
    const [r, idx] = await this.inside(modelName, start, end);
    if (!r) return { count: 0, json: '[]' };
    return { count: idx.length, json: `[${idx.map((i) => r.json[i]).join(',')}]` };
  }
}
