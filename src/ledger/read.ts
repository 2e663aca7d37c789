// Reading the ledger for the endpoints (routes/ledger.ts): closed days as signed, the tree of a
// day's node leaves (kept in memory per day: a closed day never changes) with inclusion and
// absence proofs, and the entries as the tables hold them now — a node's, or the whole day's
// export — streamed a page at a time.
import { sql, type Database } from '../db/database.js';
import { subtractDecimal } from '../ledger-format/decimal.js';
import { compareCodePoints, nodeLeafHash, toHex, type DayHeader, type Entry, type NodeLeaf } from '../ledger-format/encoding.js';
import { auditPath } from '../ledger-format/merkle.js';
import { DayEntries, type NodeRef } from './entries.js';
import { sha256 } from './hash.js';

export interface ClosedDay extends DayHeader {
  key_id: string;
  signature: string;
  closed_at: string;
}
export interface NodeLeafJson extends NodeLeaf {
  index: number;
  points: string;
}
export interface Proof {
  index: number;
  size: number;
  path: string[];
}

// encode(…, 'base64') breaks its output into lines of 76 characters; the signature (88) is
// served as one RFC 4648 string (docs/ledger.md), which strict decoders require.
const HEADER = `day::text, encode(previous_root, 'hex') AS previous_root, encode(root, 'hex') AS root, nodes, entries::int AS entries,
  credits::int AS credits, trim_scale(credited)::text AS credited, reversals::int AS reversals, trim_scale(reversed)::text AS reversed,
  key_id, translate(encode(signature, 'base64'), E'\n', '') AS signature, to_char(closed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS closed_at`;
const DAY = sql('ledger_day', `SELECT ${HEADER} FROM ledger_days WHERE day = $1::date`);
const LAST_DAYS = sql('ledger_last_days', `SELECT * FROM (SELECT ${HEADER} FROM ledger_days ORDER BY day DESC LIMIT $1::integer) d ORDER BY day`);
const STATUS = sql(
  'ledger_status',
  `SELECT s.closed_through::text AS closed_through, (SELECT min(day)::text FROM ledger_days) AS first_day FROM ledger_state s`,
);
const NODES = sql(
  'ledger_day_node_rows',
  `SELECT position AS index, node_id AS "nodeId", name, credits::int AS credits, trim_scale(credited)::text AS credited,
    reversals::int AS reversals, trim_scale(reversed)::text AS reversed, encode(entries_root, 'hex') AS entries_root, encode(digests_hash, 'hex') AS digests_hash
  FROM ledger_day_nodes WHERE day = $1::date ORDER BY position`,
);
const DIGESTS = sql(
  'ledger_day_node_digests',
  `SELECT encode(digests, 'hex') AS digests FROM ledger_day_nodes WHERE day = $1::date AND name = $2::text`,
);
const NODE_ID = sql('ledger_node_id', 'SELECT id AS "nodeId", name FROM nodes WHERE name = $1::text');
const ALL_DIGESTS = sql(
  'ledger_day_digests',
  `SELECT name, encode(digests, 'hex') AS digests FROM ledger_day_nodes WHERE day = $1::date AND position >= $2::integer ORDER BY position LIMIT $3::integer`,
);

interface Tree {
  rows: (NodeLeafJson & { nodeId: number })[];
  leaves: Uint8Array[];
  paths: Map<number, string[]>;
}

const CACHED_DAYS = 64;
const lines = (items: unknown[]): string => items.map((i) => `${JSON.stringify(i)}\n`).join('');
const entryJson = ({ node: _node, reason, ...e }: Entry) => (e.kind === 'reversal' ? { ...e, reason } : e);

export class LedgerReader {
  private readonly trees = new Map<string, Tree>();

  constructor(
    private readonly db: Database,
    private readonly window: number,
  ) {}

  async status(): Promise<{ closed_through: string | null; first_day: string | null }> {
    return (await this.db.query<{ closed_through: string | null; first_day: string | null }>(STATUS))[0]!;
  }

  async day(day: string): Promise<ClosedDay | undefined> {
    return (await this.db.query<ClosedDay>(DAY, [day]))[0];
  }

  lastDays(n: number): Promise<ClosedDay[]> {
    return this.db.query<ClosedDay>(LAST_DAYS, [n]);
  }

  /** Why a day has no record: not closed yet (and when it will be), or before the ledger's first day. */
  async missing(day: string): Promise<string> {
    const { first_day } = await this.status();
    if (first_day !== null && day < first_day) return `The ledger starts on ${first_day}: ${day} is before its first day`;
    const closes = new Date(Date.parse(`${day}T00:00:00Z`) + 86_400_000 + this.window * 1000).toISOString().replace('.000Z', 'Z');
    return `Day ${day} is not closed yet: it closes once ${closes} has passed (its end plus ${this.window / 3600} h in which verification may still take its credits back; servers look every hour)`;
  }

  /** The day's node leaves in tree order, with their hashes (cached: a closed day never changes). */
  async tree(day: string): Promise<Tree> {
    const hit = this.trees.get(day);
    if (hit) return hit;
    const rows = (await this.db.query<NodeLeafJson & { nodeId: number }>(NODES, [day])).map((r) => ({
      ...r,
      points: subtractDecimal(r.credited, r.reversed),
    }));
    const tree = { rows, leaves: rows.map((r) => nodeLeafHash(sha256, r)), paths: new Map<number, string[]>() };
    this.trees.set(day, tree);
    if (this.trees.size > CACHED_DAYS) this.trees.delete(this.trees.keys().next().value!);
    return tree;
  }

  /** Drops the cached trees (tests that change the ledger's rows by hand). */
  forget(): void {
    this.trees.clear();
  }

  async nodeTotals(day: string): Promise<NodeLeafJson[]> {
    return (await this.tree(day)).rows.map(({ nodeId: _id, ...r }) => r);
  }

  /** A node that exists (undefined: no such node). */
  async node(name: string): Promise<NodeRef | undefined> {
    return (await this.db.query<NodeRef>(NODE_ID, [name]))[0];
  }

  /** A node's day: its leaf and inclusion proof, or the neighbours that prove it has none, then its entries now. */
  async *nodeDay(header: ClosedDay, node: NodeRef): AsyncGenerator<string> {
    const { rows, leaves, paths } = await this.tree(header.day);
    const proof = (i: number): Proof => {
      let path = paths.get(i);
      if (!path) paths.set(i, (path = auditPath(sha256, leaves, i).map(toHex)));
      return { index: i, size: leaves.length, path };
    };
    const at = rows.findIndex((r) => r.name === node.name);
    const leafJson = (i: number) => {
      const { nodeId: _id, ...leaf } = rows[i]!;
      return leaf;
    };
    let head: Record<string, unknown>;
    if (at >= 0) {
      const [d] = await this.db.query<{ digests: string }>(DIGESTS, [header.day, node.name]);
      head = { day: header, node: leafJson(at), proof: proof(at), absence: null, digests: d?.digests ?? '' };
    } else {
      const right = rows.findIndex((r) => compareCodePoints(r.name, node.name) > 0);
      const r = right < 0 ? rows.length : right;
      head = {
        day: header,
        node: null,
        proof: null,
        digests: '',
        absence: {
          left: r > 0 ? { node: leafJson(r - 1), proof: proof(r - 1) } : null,
          right: r < rows.length ? { node: leafJson(r), proof: proof(r) } : null,
        },
      };
    }
    const json = JSON.stringify(head);
    yield `${json.slice(0, -1)},"entries":[`;
    let first = true;
    for await (const page of new DayEntries(this.db, header.day).pages(node)) {
      yield (first ? '' : ',') + page.map((e) => JSON.stringify(entryJson(e))).join(',');
      first = false;
    }
    yield ']}';
  }

  /** The whole day: a `day` line, then per node (by name) its signed `node` line and its entries now. JSON lines or CSV (entries only). */
  async *export(header: ClosedDay, format: 'jsonl' | 'csv'): AsyncGenerator<string> {
    const source = new DayEntries(this.db, header.day);
    const signedNodes = (await this.tree(header.day)).rows;
    const current = await source.nodes();
    if (format === 'csv') yield 'kind,job_id,node,model,points,time,reason\r\n';
    else yield lines([{ type: 'day', ...header }]);
    // The signed nodes and the nodes with entries now, merged by name; each signed node's line
    // (with its digests, read a batch at a time) comes before its entries.
    let s = 0;
    let digests: { name: string; digests: string }[] = [];
    const signedLine = async (i: number): Promise<string> => {
      if (digests.length === 0 || digests[0]!.name !== signedNodes[i]!.name) {
        digests = await this.db.query<{ name: string; digests: string }>(ALL_DIGESTS, [header.day, i, 200]);
      }
      const d = digests.shift()!;
      const { nodeId: _id, ...leaf } = signedNodes[i]!;
      return lines([{ type: 'node', ...leaf, digests: d.digests }]);
    };
    let out = '';
    for await (const chunk of source.chunks(current)) {
      for (; s < signedNodes.length && compareCodePoints(signedNodes[s]!.name, chunk.node.name) <= 0; s++)
        if (format === 'jsonl') out += await signedLine(s);
      out +=
        format === 'csv'
          ? chunk.entries
              .map(
                (e) =>
                  `${[e.kind, csvText(e.job_id), csvText(e.node), csvText(e.model), e.points, e.time, csvText(e.reason)].map(csvField).join(',')}\r\n`,
              )
              .join('')
          : lines(chunk.entries.map((e) => ({ type: 'entry', ...entryJson(e), node: e.node })));
      if (out.length > 65_536) {
        yield out;
        out = '';
      }
    }
    for (; s < signedNodes.length; s++) if (format === 'jsonl') out += await signedLine(s);
    // The last line: a reader can tell a complete export from one cut short.
    if (format === 'jsonl') out += lines([{ type: 'end' }]);
    yield out;
  }
}

/**
 * Text a client chose (job ids, model names, node names, reasons), made inert for spreadsheets
 * (OWASP's CSV injection rule): a value starting with = + - @, a tab or a carriage return would
 * be run as a formula, so it gets a leading apostrophe, which spreadsheets show as text and do
 * not display. The JSON lines export is the exact record (and what `ins ledger verify` reads);
 * the CSV is for people. Points and times are the service's own and stay numbers and times.
 */
function csvText(s: string): string {
  return /^[=+\-@\t\r]/.test(s) ? `'${s}` : s;
}

/** RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled. */
function csvField(s: string): string {
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}
