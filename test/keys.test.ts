// Keys (src/keys.ts): a prefix and 32 random bytes in base64url, drawn from the CSPRNG 128 keys
// at a time; only the SHA-256 is kept.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { hashKey, isWellFormedKey, keyKind, newKey } from '../src/keys.js';

describe('newKey', () => {
  it('makes well-formed keys of 32 bytes, all different, across many batches of random bytes', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 1000; i++) {
      const { key, hash } = newKey(i % 2 ? 'job' : 'node');
      expect(isWellFormedKey(key)).toBe(true);
      expect(keyKind(key)).toBe(i % 2 ? 'job' : 'node');
      expect(Buffer.from(key.slice(3), 'base64url')).toHaveLength(32);
      expect(hash).toBe(createHash('sha256').update(key).digest('hex'));
      expect(hashKey(key)).toBe(hash);
      seen.add(key.slice(3));
    }
    expect(seen.size).toBe(1000);
  });

  it('draws bytes that look random: every byte value about equally often', () => {
    const counts = new Array<number>(256).fill(0);
    const keys = 2000;
    for (let i = 0; i < keys; i++) for (const b of Buffer.from(newKey('job').key.slice(3), 'base64url')) counts[b]!++;
    // 64,000 bytes, 250 expected per value: a batch handed out twice, or zeroed bytes handed out,
    // would pile up far outside these bounds (the chance of a fair draw leaving them is below 1e-9).
    expect(Math.min(...counts)).toBeGreaterThan(150);
    expect(Math.max(...counts)).toBeLessThan(360);
  });
});
