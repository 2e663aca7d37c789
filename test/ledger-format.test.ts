// The ledger's format on its own (src/ledger-format): Merkle roots equal to RFC 6962/9162's for
// Certificate Transparency's published test leaves, inclusion proofs for every leaf of trees of
// every size up to 33 (and none for a changed leaf or path), the streaming root equal to the
// recursive one, code point order equal to UTF-8 byte order, and exact decimal sums.
import { hash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { addDecimal, canonicalDecimal, DecimalSum, subtractDecimal } from '../src/ledger-format/decimal.js';
import { compareCodePoints, toHex, type Sha256 } from '../src/ledger-format/encoding.js';
import { auditPath, MerkleBuilder, merkleRoot, verifyInclusion } from '../src/ledger-format/merkle.js';

const sha: Sha256 = (d) => hash('sha256', d, 'buffer');
const leafOf = (hex: string) => sha(Buffer.concat([Buffer.from([0]), Buffer.from(hex, 'hex')]));
// certificate-transparency's merkle test data: the leaves and the root of each prefix.
const LEAVES = ['', '00', '10', '2021', '3031', '40414243', '5051525354555657', '606162636465666768696a6b6c6d6e6f'];
const ROOTS = [
  '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
  'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
  'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
  'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
  '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
  '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
  'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
  '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
];

describe('the ledger format', () => {
  it('builds the roots RFC 6962 gives for the Certificate Transparency test leaves, recursively and streaming', () => {
    const leaves = LEAVES.map(leafOf);
    for (let n = 1; n <= leaves.length; n++) {
      expect(toHex(merkleRoot(sha, leaves.slice(0, n))), `${n} leaves`).toBe(ROOTS[n - 1]);
      const b = new MerkleBuilder(sha);
      for (const l of leaves.slice(0, n)) b.push(l);
      expect(toHex(b.root())).toBe(ROOTS[n - 1]);
    }
    expect(toHex(merkleRoot(sha, []))).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
  });

  it('proves every leaf of trees of 1 to 33 leaves, and nothing changed', () => {
    for (let n = 1; n <= 33; n++) {
      const leaves = Array.from({ length: n }, (_, i) => sha(Buffer.from(`leaf ${i}`)));
      const root = merkleRoot(sha, leaves);
      for (let i = 0; i < n; i++) {
        const path = auditPath(sha, leaves, i);
        expect(verifyInclusion(sha, i, n, leaves[i]!, path, root), `${i} of ${n}`).toBe(true);
        expect(verifyInclusion(sha, i, n, sha(Buffer.from('another')), path, root)).toBe(false);
        if (n > 1) expect(verifyInclusion(sha, (i + 1) % n, n, leaves[i]!, path, root)).toBe(false);
        if (path.length) {
          const bent = path.map((p) => Buffer.from(p));
          bent[0]![0]! ^= 1;
          expect(verifyInclusion(sha, i, n, leaves[i]!, bent, root)).toBe(false);
        }
      }
    }
  });

  it('orders text by code point, as UTF-8 bytes and PostgreSQL\'s "C" collation do', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme' }), fc.string({ unit: 'grapheme' }), (a, b) => {
        expect(Math.sign(compareCodePoints(a, b))).toBe(Math.sign(Buffer.compare(Buffer.from(a), Buffer.from(b))));
      }),
      { numRuns: 2000, seed: 9 },
    );
  });

  it('sums points exactly', () => {
    expect(canonicalDecimal('001.500')).toBe('1.5');
    expect(addDecimal('0.1', '0.2')).toBe('0.3');
    expect(subtractDecimal('1.25', '3')).toBe('-1.75');
    const sum = new DecimalSum();
    for (let i = 0; i < 1000; i++) sum.add(i % 2 ? '0.1' : '12345678901234567890.05');
    expect(sum.total()).toBe('6172839450617283945075'); // 500 × 12345678901234567890.05 + 500 × 0.1
  });
});
