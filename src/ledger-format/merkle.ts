// Merkle trees as RFC 9162 (Certificate Transparency 2.0) §2.1 defines them, over leaf hashes
// made by encoding.ts (whose prefixes 0x00 and 0x02 keep leaves apart from interior nodes,
// 0x01): MTH of no leaves is SHA-256 of nothing, of one leaf that leaf's hash, of n > 1 leaves
// SHA-256(0x01 || MTH(first k) || MTH(rest)) with k the largest power of two below n. An odd
// leaf is never duplicated: it is promoted (the unbalanced split), so no two lists share a root.
import { PREFIX_INTERIOR, type Sha256 } from './encoding.js';

const pair = new Uint8Array(65);
pair[0] = PREFIX_INTERIOR;

export function interior(sha: Sha256, left: Uint8Array, right: Uint8Array): Uint8Array {
  pair.set(left, 1);
  pair.set(right, 33);
  return sha(pair);
}

/**
 * The root of leaves pushed one at a time, in O(log n) memory: perfect subtrees are merged as
 * soon as two of a size meet, and the rest folded right to left at the end — exactly MTH.
 */
export class MerkleBuilder {
  private readonly hashes: Uint8Array[] = [];
  private readonly sizes: number[] = [];
  count = 0;

  constructor(private readonly sha: Sha256) {}

  push(leaf: Uint8Array): void {
    let hash = leaf;
    let size = 1;
    while (this.sizes.length > 0 && this.sizes[this.sizes.length - 1] === size) {
      hash = interior(this.sha, this.hashes.pop()!, hash);
      this.sizes.pop();
      size *= 2;
    }
    this.hashes.push(hash);
    this.sizes.push(size);
    this.count++;
  }

  root(): Uint8Array {
    if (this.hashes.length === 0) return this.sha(new Uint8Array(0));
    let r = this.hashes[this.hashes.length - 1]!;
    for (let i = this.hashes.length - 2; i >= 0; i--) r = interior(this.sha, this.hashes[i]!, r);
    return r;
  }
}

const split = (n: number): number => {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
};

/** MTH of leaves[lo, hi). */
export function merkleRoot(sha: Sha256, leaves: Uint8Array[], lo = 0, hi = leaves.length): Uint8Array {
  const n = hi - lo;
  if (n === 0) return sha(new Uint8Array(0));
  if (n === 1) return leaves[lo]!;
  const k = split(n);
  return interior(sha, merkleRoot(sha, leaves, lo, lo + k), merkleRoot(sha, leaves, lo + k, hi));
}

/** RFC 9162 §2.1.3.1 PATH(m, D[n]): the sibling hashes from the leaf up. */
export function auditPath(sha: Sha256, leaves: Uint8Array[], m: number, lo = 0, hi = leaves.length): Uint8Array[] {
  const n = hi - lo;
  if (n <= 1) return [];
  const k = split(n);
  return m - lo < k
    ? [...auditPath(sha, leaves, m, lo, lo + k), merkleRoot(sha, leaves, lo + k, hi)]
    : [...auditPath(sha, leaves, m, lo + k, hi), merkleRoot(sha, leaves, lo, lo + k)];
}

/** RFC 9162 §2.1.3.2: whether `leaf` is leaf number `index` of a tree of `size` leaves with `root`. */
export function verifyInclusion(sha: Sha256, index: number, size: number, leaf: Uint8Array, path: Uint8Array[], root: Uint8Array): boolean {
  if (!Number.isInteger(index) || !Number.isInteger(size) || index < 0 || index >= size) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of path) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = interior(sha, p, r);
      if (fn % 2 === 0)
        while (fn % 2 === 0 && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
    } else {
      r = interior(sha, r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  if (sn !== 0 || r.length !== root.length) return false;
  for (let i = 0; i < r.length; i++) if (r[i] !== root[i]) return false;
  return true;
}
