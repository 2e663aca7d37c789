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
// A request decides what it can from the cached roster, then sends one statement (shared
// with concurrent requests) that reads the model's version and decides the undecided nodes
// in the same snapshot. If the version is the roster's, that is the answer; otherwise the
// roster reloads (once at a time per model) and the request tries again. A roster older than
// maxAgeMs is reloaded too: fresher last successes leave fewer nodes undecided.
import { sql, type Queryable } from '../db/database.js';
import { Batcher } from '../db/batcher.js';
import { bound as sqlBound, ROSTER_CHECK, uniqueNodes } from './unique-nodes.js';
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

const ROSTER = sql(
  'roster_load',
  `SELECT mn.node_id::int AS "nodeId", n.name,
    (extract(epoch FROM date_trunc('milliseconds', mn.first_success_at)) * 1000)::float8 AS "firstMs",
    (extract(microseconds FROM mn.first_success_at)::int % 1000) AS "firstUs",
    (extract(epoch FROM date_trunc('milliseconds', mn.last_success_at)) * 1000)::float8 AS "lastMs",
    (extract(microseconds FROM mn.last_success_at)::int % 1000) AS "lastUs"
  FROM model_nodes mn JOIN nodes n ON n.id = mn.node_id
  WHERE mn.model_id = $1::integer ORDER BY n.name COLLATE "C"`,
);

interface Row {
  nodeId: number;
  name: string;
  firstMs: number;
  firstUs: number;
  lastMs: number;
  lastUs: number;
}
interface Model {
  id: number;
  version: string;
}
interface Check {
  modelName: string;
  start: string | null;
  end: string | null;
  nodeIds: number[];
}
/** The model (undefined: unknown) and which of the nodes asked about are in the window. */
interface Checked {
  model: Model | undefined;
  found: Set<number>;
}

/** An instant bound (ISO UTC) as ms + µs; null = open. */
function bound(iso: string | null, open: number): [number, number] {
  if (iso === null) return [open, 0];
  const key = instantKey(iso); // YYYY-MM-DDTHH:MM:SS.ffffffZ
  return [Date.parse(`${key.slice(0, 23)}Z`), Number(key.slice(23, 26))];
}

// Node states; 0 (the zero of a fresh Uint8Array) is out.
const IN = 1;
const UNDECIDED = 2;
const MAX_ATTEMPTS = 3;

/** Each node's state for the window by the rules at the top, and the undecided node ids. */
function decide(r: Roster, start: string | null, end: string | null): { state: Uint8Array; undecided: number[] } {
  const [sMs, sUs] = bound(start, -Infinity);
  const [eMs, eUs] = bound(end, Infinity);
  const sDay = Math.floor(sMs / DAY_MS);
  const n = r.names.length;
  const state = new Uint8Array(n);
  const undecided: number[] = [];
  for (let i = 0; i < n; i++) {
    const fMs = r.firstMs[i]!;
    const lMs = r.lastMs[i]!;
    if (fMs > eMs || (fMs === eMs && r.firstUs[i]! > eUs)) continue;
    const firstFromStart = fMs > sMs || (fMs === sMs && r.firstUs[i]! >= sUs);
    const lastFromStart = lMs > sMs || (lMs === sMs && r.lastUs[i]! >= sUs);
    const lastToEnd = lMs < eMs || (lMs === eMs && r.lastUs[i]! <= eUs);
    if (firstFromStart || (lastFromStart && lastToEnd)) state[i] = IN;
    else if (!lastFromStart && Math.floor(lMs / DAY_MS) < sDay) continue;
    else {
      state[i] = UNDECIDED;
      undecided.push(r.nodeIds[i]!);
    }
  }
  return { state, undecided };
}

export interface RosterOptions {
  /** How stale last successes may get before a reload (fewer nodes left undecided). */
  maxAgeMs?: number;
  maxModels?: number;
}

export class RosterCache {
  private readonly rosters = new Map<string, Roster>();
  private readonly loading = new Map<string, Promise<Roster>>();
  private readonly checks: Batcher<Check, Checked>;
  private readonly maxAgeMs: number;
  private readonly maxModels: number;

  constructor(
    private readonly db: Queryable,
    opts: RosterOptions = {},
  ) {
    this.maxAgeMs = opts.maxAgeMs ?? 2_000;
    this.maxModels = opts.maxModels ?? 1_000;
    this.checks = new Batcher(
      async (checks) => {
        const rows = await db.query<{ i: number; id: number | null; version: string | null; found: number[] | null }>(ROSTER_CHECK, [
          checks.map((c) => c.modelName),
          checks.map((c) => sqlBound(c.start, '-infinity')),
          checks.map((c) => sqlBound(c.end, 'infinity')),
          checks.map((c) => `{${c.nodeIds.join(',')}}`),
        ]);
        const out = new Array<Checked>(checks.length);
        for (const r of rows) {
          out[r.i - 1] = { model: r.id === null ? undefined : { id: r.id, version: r.version! }, found: new Set((r.found ?? []).map(Number)) };
        }
        return out;
      },
      { maxBatch: 64, maxInFlight: 2 },
    );
  }

  /** The roster of at least the given version; one reload at a time per model. */
  private async atLeast(modelName: string, model: Model): Promise<Roster> {
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
    const done = () => {
      if (this.loading.get(modelName) === p) this.loading.delete(modelName);
    };
    p.then(done, done);
    return p;
  }

  /**
   * Indexes (in name order) of the roster's nodes with a success in [start, end] (ISO UTC,
   * null = open); undefined when the model is unknown. One shared statement per request
   * when the cached roster is current: it reads the version and decides the undecided nodes.
   */
  private async inside(modelName: string, start: string | null, end: string | null): Promise<[Pick<Roster, 'names' | 'json'>, number[]] | undefined> {
    let r = this.rosters.get(modelName);
    if (r && Date.now() - r.loadedAt > this.maxAgeMs) r = undefined;
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const decided = r ? decide(r, start, end) : undefined;
      const checked = await this.checks.load({ modelName, start, end, nodeIds: decided?.undecided ?? [] });
      if (!checked.model) return undefined;
      if (r && decided && checked.model.version === r.version) {
        const { state } = decided;
        const out: number[] = [];
        for (let i = 0; i < state.length; i++) if (state[i] === IN || (state[i] === UNDECIDED && checked.found.has(r.nodeIds[i]!))) out.push(i);
        return [r, out];
      }
      r = await this.atLeast(modelName, checked.model);
    }
    // The version kept moving (a burst of new nodes or days): the exact query alone.
    const names = await uniqueNodes(this.db, modelName, start, end);
    return [{ names, json: names.map((n) => JSON.stringify(n)) }, names.map((_, i) => i)];
  }

  /** The nodes with a success in [start, end] (ISO UTC, null = open), sorted, as a JSON array text, and their number. */
  async uniqueNodesJson(modelName: string, start: string | null, end: string | null): Promise<{ count: number; json: string }> {
    const found = await this.inside(modelName, start, end);
    if (!found) return { count: 0, json: '[]' };
    const [r, idx] = found;
    return { count: idx.length, json: `[${idx.map((i) => r.json[i]).join(',')}]` };
  }
}
