// A day's ledger entries as the tables hold them now (docs/ledger.md, "Entries"): the credits
// received that day (job_results rows that are, or were until reversed, successes) and the
// reversals whose ledger day it is (point_reversals), per node, in canonical order, a page at a
// time — a day of millions of entries is streamed, never held. Closing a day, its export, a
// node's view and the database check all read through here, so they cannot disagree.
import { sql, type Queryable } from '../db/database.js';
import type { Entry } from '../ledger-format/encoding.js';

export interface NodeRef {
  nodeId: number;
  name: string;
}
export interface DayNode extends NodeRef {
  credits: number;
  reversals: number;
}

const START = `($1::date::timestamp AT TIME ZONE 'UTC')`;
const END = `(($1::date + 1)::timestamp AT TIME ZONE 'UTC')`;

// The nodes with entries on $1, by name in code point order, with how many of each kind. Each
// count is a range of an index on (node_id, …); nodes without a row in `nodes` are not part of
// the ledger.
const DAY_NODES = sql(
  'ledger_day_nodes',
  `SELECT n.id AS "nodeId", n.name, c.credits::int AS credits, c.reversals::int AS reversals FROM nodes n
  CROSS JOIN LATERAL (SELECT
    (SELECT count(*) FROM job_results r WHERE r.node_id = n.id AND r.status = 'success' AND r.received_at >= ${START} AND r.received_at < ${END})
    + (SELECT count(*) FROM job_results r WHERE r.node_id = n.id AND r.status = 'reversed' AND r.received_at >= ${START} AND r.received_at < ${END}) AS credits,
    (SELECT count(*) FROM point_reversals p WHERE p.day = $1::date AND p.node_id = n.id) AS reversals) c
  WHERE c.credits > 0 OR c.reversals > 0
  ORDER BY n.name COLLATE "C"`,
);

const TIME = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

// A page of a node's credits on $1 after ($3 time, $4 job id): successes and reversed ones,
// each by its own index on (node_id, received_at).
const CREDITS = sql(
  'ledger_credits_page',
  `SELECT job_id, model_id AS "modelId", trim_scale(points)::text AS points, ${TIME('received_at')} AS time FROM (
    SELECT job_id, model_id, points, received_at FROM job_results
    WHERE node_id = $2::bigint AND status = 'success' AND received_at >= $3::timestamptz AND received_at < ${END}
    UNION ALL
    SELECT job_id, model_id, points, received_at FROM job_results
    WHERE node_id = $2::bigint AND status = 'reversed' AND received_at >= $3::timestamptz AND received_at < ${END}) e
  WHERE received_at > $3::timestamptz OR job_id COLLATE "C" > $4::text
  ORDER BY received_at, job_id COLLATE "C" LIMIT $5::integer`,
);

const REVERSALS = sql(
  'ledger_reversals_page',
  `SELECT job_id, model_id AS "modelId", trim_scale(points)::text AS points, ${TIME('reversed_at')} AS time, reason
  FROM point_reversals
  WHERE day = $1::date AND node_id = $2::bigint AND (reversed_at > $3::timestamptz OR (reversed_at = $3::timestamptz AND job_id COLLATE "C" > $4::text))
  ORDER BY reversed_at, job_id COLLATE "C" LIMIT $5::integer`,
);

// All the entries of several small nodes at once ($2: their ids), by node.
const CREDITS_OF = sql(
  'ledger_credits_of',
  `SELECT node_id AS "nodeId", job_id, model_id AS "modelId", trim_scale(points)::text AS points, ${TIME('received_at')} AS time FROM (
    SELECT node_id, job_id, model_id, points, received_at FROM job_results
    WHERE node_id = ANY($2::bigint[]) AND status = 'success' AND received_at >= ${START} AND received_at < ${END}
    UNION ALL
    SELECT node_id, job_id, model_id, points, received_at FROM job_results
    WHERE node_id = ANY($2::bigint[]) AND status = 'reversed' AND received_at >= ${START} AND received_at < ${END}) e
  ORDER BY node_id, received_at, job_id COLLATE "C"`,
);
const REVERSALS_OF = sql(
  'ledger_reversals_of',
  `SELECT node_id AS "nodeId", job_id, model_id AS "modelId", trim_scale(points)::text AS points, ${TIME('reversed_at')} AS time, reason
  FROM point_reversals WHERE day = $1::date AND node_id = ANY($2::bigint[])
  ORDER BY node_id, reversed_at, job_id COLLATE "C"`,
);

const MODELS = sql('ledger_models', 'SELECT id, name FROM models');

export const PAGE = 5_000;

interface Row {
  nodeId?: number;
  job_id: string;
  modelId: number;
  points: string;
  time: string;
  reason?: string;
}

/** A node's entries, or the next page of them (`done`: its last). */
export interface NodeChunk {
  node: DayNode;
  entries: Entry[];
  done: boolean;
}

/** The entries of one day, read from the tables as they are now. */
export class DayEntries {
  private models = new Map<number, string>();

  constructor(
    private readonly db: Queryable,
    readonly day: string,
    private readonly pageSize = PAGE,
  ) {}

  nodes(): Promise<DayNode[]> {
    return this.db.query<DayNode>(DAY_NODES, [this.day]);
  }

  /** How many entries the day has now, as nodes() counts them. */
  async count(): Promise<{ credits: number; reversals: number }> {
    const nodes = await this.nodes();
    return { credits: nodes.reduce((s, n) => s + n.credits, 0), reversals: nodes.reduce((s, n) => s + n.reversals, 0) };
  }

  /**
   * The entries of these nodes in order, as chunks: nodes with few entries several to a
   * statement (about a page of entries), a node with more a page at a time.
   */
  async *chunks(nodes: DayNode[]): AsyncGenerator<NodeChunk> {
    for (let i = 0; i < nodes.length; ) {
      const node = nodes[i]!;
      if (node.credits + node.reversals > this.pageSize) {
        let last: Entry[] | undefined;
        for await (const page of this.pages(node)) {
          if (last) yield { node, entries: last, done: false };
          last = page;
        }
        yield { node, entries: last ?? [], done: true };
        i++;
        continue;
      }
      const batch: DayNode[] = [];
      for (let size = 0; i < nodes.length && size + nodes[i]!.credits + nodes[i]!.reversals <= this.pageSize; i++) {
        batch.push(nodes[i]!);
        size += nodes[i]!.credits + nodes[i]!.reversals;
      }
      const ids = batch.map((n) => n.nodeId);
      const byNode = new Map<number, Entry[]>(batch.map((n) => [n.nodeId, []]));
      for (const [kind, statement] of [
        ['credit', CREDITS_OF],
        ['reversal', REVERSALS_OF],
      ] as const) {
        const rows = await this.db.query<Row>(statement, [this.day, ids]);
        if (rows.some((r) => !this.models.has(r.modelId))) await this.loadModels(rows);
        const names = new Map(batch.map((n) => [n.nodeId, n.name]));
        for (const r of rows)
          byNode.get(r.nodeId!)!.push({
            kind,
            job_id: r.job_id,
            node: names.get(r.nodeId!)!,
            model: this.models.get(r.modelId)!,
            points: r.points,
            time: r.time,
            reason: r.reason ?? '',
          });
      }
      for (const n of batch) yield { node: n, entries: byNode.get(n.nodeId)!, done: true };
    }
  }

  /** The node's entries in canonical order, a page (an array) at a time. */
  async *pages(node: NodeRef): AsyncGenerator<Entry[]> {
    for (const [kind, statement, start] of [
      ['credit', CREDITS, `${this.day}T00:00:00Z`],
      ['reversal', REVERSALS, '-infinity'],
    ] as const) {
      let after: { time: string; job: string } = { time: start, job: '' };
      for (;;) {
        const rows = await this.db.query<Row>(statement, [this.day, node.nodeId, after.time, after.job, this.pageSize]);
        if (rows.length === 0) break;
        if (rows.some((r) => !this.models.has(r.modelId))) await this.loadModels(rows);
        yield rows.map((r) => ({
          kind,
          job_id: r.job_id,
          node: node.name,
          model: this.models.get(r.modelId)!,
          points: r.points,
          time: r.time,
          reason: r.reason ?? '',
        }));
        const last = rows[rows.length - 1]!;
        after = { time: last.time, job: last.job_id };
        if (rows.length < this.pageSize) break;
      }
    }
  }

  private async loadModels(rows: Row[]): Promise<void> {
    this.models = new Map((await this.db.query<{ id: number; name: string }>(MODELS)).map((m) => [m.id, m.name]));
    // A row naming no model (changed by hand): an entry that cannot match what was signed.
    for (const r of rows) if (!this.models.has(r.modelId)) this.models.set(r.modelId, `(unknown model #${r.modelId})`);
  }
}
