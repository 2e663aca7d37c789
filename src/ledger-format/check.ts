// Checking closed days, the same way wherever the data comes from (the export over HTTP, a
// node's entries and proof, the database itself): signatures and the chain of roots, a day
// recomputed from its entries against what was signed, and a node's leaf against the day's
// root. Every finding is a Difference naming the day, the node and the entry.
import { compareNode, compareTotals, DayAccumulator, NodeAccumulator, type Difference } from './day.js';
import {
  compareCodePoints,
  entryName,
  fromHex,
  nodeLeafHash,
  nextDay,
  signedBytes,
  ZERO_ROOT,
  type DayHeader,
  type Entry,
  type NodeLeaf,
  type Sha256,
} from './encoding.js';
import { merkleRoot, verifyInclusion } from './merkle.js';

/** An Ed25519 check of a signature (base64) over bytes, by the platform's crypto. */
export type VerifySignature = (message: Uint8Array, signatureBase64: string) => boolean | Promise<boolean>;

export interface SignedDay extends DayHeader {
  key_id: string;
  signature: string;
}

/**
 * Signatures (by the key `keyId`) and the chain: each day's previous root is the root of the
 * day before it, with no day missing. `before` is the day before the first checked, if any;
 * `firstDay` the ledger's first day, whose previous root is all zeros.
 */
export async function checkChain(
  days: SignedDay[],
  keyId: string,
  verify: VerifySignature,
  before?: SignedDay,
  firstDay?: string,
): Promise<Difference[]> {
  const out: Difference[] = [];
  let prev = before;
  for (const d of days) {
    if (d.key_id !== keyId) out.push({ day: d.day, what: `signed with key ${d.key_id}, not the published key ${keyId}` });
    else if (!(await verify(signedBytes(d), d.signature)))
      out.push({ day: d.day, what: 'the signature does not verify (the signed record was changed)' });
    if (prev && nextDay(prev.day) !== d.day) out.push({ day: d.day, what: `the chain skips from ${prev.day} to ${d.day}` });
    else if (prev && d.previous_root !== prev.root) out.push({ day: d.day, what: `its previous root is not the root of ${prev.day}` });
    else if (d.day === firstDay && d.previous_root !== ZERO_ROOT) out.push({ day: d.day, what: 'the first day of the ledger has a previous root' });
    prev = d;
  }
  return out;
}

/** Whether the signed node leaves (in tree order) give the signed root and are in name order. */
export function checkLeaves(sha: Sha256, header: DayHeader, leaves: NodeLeaf[]): Difference[] {
  const out: Difference[] = [];
  for (let i = 1; i < leaves.length; i++) {
    if (compareCodePoints(leaves[i - 1]!.name, leaves[i]!.name) >= 0)
      out.push({ day: header.day, node: leaves[i]!.name, what: 'the node leaves are not in name order' });
  }
  const root = merkleRoot(
    sha,
    leaves.map((l) => nodeLeafHash(sha, l)),
  );
  if (leaves.length !== header.nodes) out.push({ day: header.day, what: `${leaves.length} node leaves, ${header.nodes} signed` });
  if (!sameHex(root, header.root)) out.push({ day: header.day, what: 'the node totals no longer give the signed root (a total was changed)' });
  return out;
}

export interface NodeEntries {
  name: string;
  entries: Entry[];
}

/**
 * A day recomputed from all its entries (nodes by name, each with its entries) against what
 * was signed: the header, and each node's leaf with the digests of its entries (to name an
 * entry that changed).
 */
export async function checkDayEntries(
  sha: Sha256,
  header: DayHeader,
  signed: Map<string, NodeLeaf & { digests?: Uint8Array }>,
  nodes: AsyncIterable<NodeEntries>,
): Promise<Difference[]> {
  const out: Difference[] = [];
  const day = new DayAccumulator(sha);
  const seen = new Set<string>();
  for await (const n of nodes) {
    seen.add(n.name);
    out.push(...checkNodeEntries(sha, header.day, signed.get(n.name), n, (summary) => day.add(summary)));
  }
  for (const [name, leaf] of signed) {
    if (!seen.has(name))
      out.push({ day: header.day, node: name, what: `all its ${leaf.credits + leaf.reversals} entries of the closed day are gone` });
  }
  if (day.misplaced) out.push({ day: header.day, node: day.misplaced, what: 'nodes are not in name order' });
  const totals = day.finish();
  // The root differs whenever anything above differs: said once, only when nothing else explains it.
  out.push(...compareTotals(header.day, header, totals).filter((d) => out.length === 0 || !d.what.startsWith('the entries no longer give')));
  return out;
}

/** One node's entries against its signed leaf (undefined: it had none when the day closed). */
export function checkNodeEntries(
  sha: Sha256,
  day: string,
  signed: (NodeLeaf & { digests?: Uint8Array }) | undefined,
  n: NodeEntries,
  onSummary?: (s: ReturnType<NodeAccumulator['finish']>) => void,
): Difference[] {
  const acc = new NodeAccumulator(sha, n.name);
  for (const entry of n.entries) acc.add(entry);
  const summary = acc.finish();
  onSummary?.(summary);
  const out: Difference[] = [];
  if (acc.misplaced) out.push({ day, node: n.name, entry: entryName(acc.misplaced), what: 'out of canonical order (or of another node)' });
  if (!signed) {
    out.push(
      ...n.entries.map((e) => ({ day, node: n.name, entry: entryName(e), what: 'added since the day closed (the node had no entries that day)' })),
    );
    return out;
  }
  out.push(...compareNode(day, signed, summary, n.entries));
  return out;
}

/** Whether a node leaf is leaf `index` of the day's tree (an inclusion proof). */
export function checkInclusion(sha: Sha256, header: DayHeader, leaf: NodeLeaf, proof: { index: number; size: number; path: string[] }): boolean {
  return (
    proof.size === header.nodes &&
    verifyInclusion(sha, proof.index, proof.size, nodeLeafHash(sha, leaf), proof.path.map(fromHex), fromHex(header.root))
  );
}

/**
 * That a node has no leaf on a day: its neighbours in name order are leaves next to each other
 * (or the first or last), and the name falls between them.
 */
export function checkAbsence(
  sha: Sha256,
  header: DayHeader,
  name: string,
  absence: {
    left: { node: NodeLeaf; proof: { index: number; size: number; path: string[] } } | null;
    right: { node: NodeLeaf; proof: { index: number; size: number; path: string[] } } | null;
  },
): boolean {
  const { left, right } = absence;
  if (!left && !right) return header.nodes === 0 && header.root === toHexOfEmpty(sha);
  if (left && !(compareCodePoints(left.node.name, name) < 0 && checkInclusion(sha, header, left.node, left.proof))) return false;
  if (right && !(compareCodePoints(name, right.node.name) < 0 && checkInclusion(sha, header, right.node, right.proof))) return false;
  const leftIndex = left ? left.proof.index : -1;
  const rightIndex = right ? right.proof.index : header.nodes;
  return rightIndex === leftIndex + 1;
}

function toHexOfEmpty(sha: Sha256): string {
  return Array.from(sha(new Uint8Array(0)), (b) => b.toString(16).padStart(2, '0')).join('');
}

function sameHex(bytes: Uint8Array, hex: string): boolean {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('') === hex;
}
