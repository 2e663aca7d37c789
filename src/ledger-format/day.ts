// A day of the ledger recomputed from its entries: each node's totals, entries root and
// digests (NodeAccumulator), then the day's root and totals over the nodes in name order
// (DayAccumulator). The server closes days with these, and every check recomputes with them,
// so signer and checkers cannot disagree on the rules. Also: how two days (or two nodes) differ,
// in words that name the day, the node and the entry.
import { addDecimal, DecimalSum } from './decimal.js';
import {
  compareCodePoints,
  compareEntries,
  DIGEST_BYTES,
  entryLeafHash,
  entryName,
  nodeLeafHash,
  toHex,
  type DayHeader,
  type Entry,
  type NodeLeaf,
  type Sha256,
} from './encoding.js';
import { MerkleBuilder } from './merkle.js';

/** A node's day as recomputed: its leaf, and the digests of its entries in order. */
export interface NodeSummary extends NodeLeaf {
  digests: Uint8Array;
  leaf: Uint8Array;
}

export class NodeAccumulator {
  private readonly tree: MerkleBuilder;
  private digests = new Uint8Array(DIGEST_BYTES * 64);
  private last: Entry | undefined;
  private readonly credited = new DecimalSum();
  private readonly reversed = new DecimalSum();
  private credits = 0;
  private reversals = 0;
  /** The first entry out of canonical order (or of another node), if any. */
  misplaced: Entry | undefined;

  constructor(
    private readonly sha: Sha256,
    readonly name: string,
  ) {
    this.tree = new MerkleBuilder(sha);
  }

  get count(): number {
    return this.tree.count;
  }

  /** Adds the next entry. */
  add(e: Entry): void {
    if (!this.misplaced && (e.node !== this.name || (this.last && compareEntries(this.last, e) >= 0))) this.misplaced = e;
    this.last = e;
    const leaf = entryLeafHash(this.sha, e);
    this.tree.push(leaf);
    const at = (this.tree.count - 1) * DIGEST_BYTES;
    if (at + DIGEST_BYTES > this.digests.length) {
      const bigger = new Uint8Array(this.digests.length * 2);
      bigger.set(this.digests);
      this.digests = bigger;
    }
    for (let i = 0; i < DIGEST_BYTES; i++) this.digests[at + i] = leaf[i]!;
    if (e.kind === 'credit') {
      this.credits++;
      this.credited.add(e.points);
    } else {
      this.reversals++;
      this.reversed.add(e.points);
    }
  }

  finish(): NodeSummary {
    const digests = this.digests.slice(0, this.tree.count * DIGEST_BYTES);
    const leaf: NodeLeaf = {
      name: this.name,
      credits: this.credits,
      credited: this.credited.total(),
      reversals: this.reversals,
      reversed: this.reversed.total(),
      entries_root: toHex(this.tree.root()),
      digests_hash: toHex(this.sha(digests)),
    };
    return { ...leaf, digests, leaf: nodeLeafHash(this.sha, leaf) };
  }
}

export type DayTotals = Omit<DayHeader, 'day' | 'previous_root'>;

export class DayAccumulator {
  private readonly tree: MerkleBuilder;
  private lastName: string | undefined;
  private readonly totals = { nodes: 0, entries: 0, credits: 0, credited: '0', reversals: 0, reversed: '0' };
  /** The first node out of name order, if any. */
  misplaced: string | undefined;

  constructor(sha: Sha256) {
    this.tree = new MerkleBuilder(sha);
  }

  add(n: NodeLeaf & { leaf: Uint8Array }): void {
    if (!this.misplaced && this.lastName !== undefined && compareCodePoints(this.lastName, n.name) >= 0) this.misplaced = n.name;
    this.lastName = n.name;
    this.tree.push(n.leaf);
    const t = this.totals;
    t.nodes++;
    t.entries += n.credits + n.reversals;
    t.credits += n.credits;
    t.credited = addDecimal(t.credited, n.credited);
    t.reversals += n.reversals;
    t.reversed = addDecimal(t.reversed, n.reversed);
  }

  finish(): DayTotals {
    return { root: toHex(this.tree.root()), ...this.totals };
  }
}

/** One difference a check found: which day, node and entry, and what. */
export interface Difference {
  day: string;
  node?: string;
  entry?: string;
  what: string;
}

export function describe(d: Difference): string {
  return (
    [`day ${d.day}`, d.node !== undefined ? `node ${d.node}` : '', d.entry !== undefined ? `entry ${d.entry}` : ''].filter(Boolean).join(', ') +
    `: ${d.what}`
  );
}

/** "N difference(s)": how both checks, `ins ledger verify` and with --server, count what they found. */
export const countDifferences = (n: number): string => `${n} difference${n === 1 ? '' : 's'}`;

/** Differences between what was signed for a day and what its entries give now. */
export function compareTotals(day: string, signed: DayTotals, now: DayTotals): Difference[] {
  const out: Difference[] = [];
  for (const k of ['nodes', 'entries', 'credits', 'credited', 'reversals', 'reversed'] as const) {
    if (String(signed[k]) !== String(now[k])) out.push({ day, what: `${k}: ${now[k]} now, ${signed[k]} when the day closed` });
  }
  if (signed.root !== now.root)
    out.push({ day, what: `the entries no longer give the signed root (${signed.root.slice(0, 16)}…, now ${now.root.slice(0, 16)}…)` });
  return out;
}

/**
 * Differences between a node's day as signed (its leaf and the digests of its entries) and as
 * recomputed now from its current entries: totals, and each entry that is new or changed
 * (its digest is not among the signed ones) or gone (a signed digest no entry has now).
 */
export function compareNode(day: string, signed: NodeLeaf & { digests?: Uint8Array }, now: NodeSummary, entries: Entry[]): Difference[] {
  const node = signed.name;
  const out: Difference[] = [];
  for (const k of ['credits', 'credited', 'reversals', 'reversed'] as const) {
    if (String(signed[k]) !== String(now[k])) out.push({ day, node, what: `${k}: ${now[k]} now, ${signed[k]} when the day closed` });
  }
  if (signed.entries_root !== now.entries_root || signed.digests_hash !== now.digests_hash) {
    const found = signed.digests ? entryDifferences(day, node, signed.digests, entries, now.digests) : [];
    out.push(...(found.length ? found : [{ day, node, what: 'its entries no longer give the signed entries root' }]));
  }
  return out;
}

function entryDifferences(day: string, node: string, digests: Uint8Array, entries: Entry[], nowDigests: Uint8Array): Difference[] {
  const positions = new Map<string, number[]>();
  const signedCount = digests.length / DIGEST_BYTES;
  for (let i = 0; i < signedCount; i++) {
    const key = toHex(digests.subarray(i * DIGEST_BYTES, (i + 1) * DIGEST_BYTES));
    positions.set(key, [...(positions.get(key) ?? []), i]);
  }
  const matched = new Map<number, Entry>();
  const unmatched: Entry[] = [];
  for (const [i, entry] of entries.entries()) {
    const at = positions.get(toHex(nowDigests.subarray(i * DIGEST_BYTES, (i + 1) * DIGEST_BYTES)))?.shift();
    if (at === undefined) unmatched.push(entry);
    else matched.set(at, entry);
  }
  const gone: number[] = [];
  for (let i = 0; i < signedCount; i++) if (!matched.has(i)) gone.push(i);
  // As many entries unlike any signed one as signed ones left over: changed in place. Beyond
  // that, entries that are new, or signed ones that no entry is now (named by their place).
  const out: Difference[] = unmatched.map((e, i) => ({
    day,
    node,
    entry: entryName(e),
    what: i < gone.length ? 'changed since the day closed' : 'added since the day closed',
  }));
  for (const i of gone.slice(unmatched.length)) {
    let before: Entry | undefined;
    for (let j = i - 1; j >= 0 && !before; j--) before = matched.get(j);
    out.push({
      day,
      node,
      what: `entry ${i + 1} of ${signedCount} when the day closed is gone${before ? ` (it came after ${entryName(before)})` : ' (it was the first)'}`,
    });
  }
  return out;
}
