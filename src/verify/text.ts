// Comparing answers without a model: normalised text (whitespace and case), its words, how far
// two answers agree (Jaccard similarity of their word sets), a 64-bit hash of the normalised
// text ("the same answer") and a 64-bit SimHash that stays within a few bits when a text is
// changed a little (a replayed answer with a word swapped). Hashes are signed 64-bit integers,
// as PostgreSQL's bigint holds them. Measured thresholds: test/verify-text.test.ts.
import { createHash } from 'node:crypto';

/** Whitespace collapsed, case folded: what "the same answer" means. */
export function normalise(text: string): string {
  return text.toLowerCase().replace(/\s+/g, ' ').trim();
}

/** Words of a text, case folded, punctuation aside. */
export function words(text: string): string[] {
  return text
    .toLowerCase()
    .split(/[^\p{L}\p{N}']+/u)
    .filter(Boolean);
}

/** |A ∩ B| / |A ∪ B| over the two answers' word sets; 1 for two answers without words. */
export function similarity(a: string, b: string): number {
  const x = new Set(words(a));
  const y = new Set(words(b));
  if (x.size === 0 && y.size === 0) return 1;
  let both = 0;
  for (const w of x) if (y.has(w)) both++;
  return both / (x.size + y.size - both);
}

/** A 64-bit hash of the normalised text. */
export function textHash(text: string): bigint {
  return createHash('sha256').update(normalise(text)).digest().readBigInt64BE(0);
}

// FNV-1a with a seed, then murmur3's finaliser so every output bit depends on every input bit.
function hash32(s: string, seed: number): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** 64-bit SimHash of a text's word pairs (its words, when it has fewer than two). */
export function simhash(text: string): bigint {
  const w = words(text);
  const shingles = w.length < 2 ? w : w.slice(1).map((x, i) => `${w[i]} ${x}`);
  const votes = new Int32Array(64);
  for (const s of shingles) {
    const lo = hash32(s, 0);
    const hi = hash32(s, 0x9e3779b9);
    for (let bit = 0; bit < 32; bit++) {
      votes[bit]! += (lo >>> bit) & 1 ? 1 : -1;
      votes[bit + 32]! += (hi >>> bit) & 1 ? 1 : -1;
    }
  }
  let lo = 0;
  let hi = 0;
  for (let bit = 0; bit < 32; bit++) {
    if (votes[bit]! > 0) lo |= 1 << bit;
    if (votes[bit + 32]! > 0) hi |= 1 << bit;
  }
  return BigInt.asIntN(64, (BigInt(hi >>> 0) << 32n) | BigInt(lo >>> 0));
}

/** Bits that differ between two SimHashes. */
export function distance(a: bigint, b: bigint): number {
  let x = BigInt.asUintN(64, a ^ b);
  let n = 0;
  for (; x; n++) x &= x - 1n;
  return n;
}
