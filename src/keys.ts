// Keys and tokens: 32 random bytes, base64url, behind a prefix that tells the kind so logs and
// support read themselves: nk_ node key, rk_ reader key, uk_ user key, ns_ node session token,
// jk_ job key (one per lease). Only the SHA-256 is stored; random keys of this size need no
// slow hash. Looking a key up by its hash, never comparing the key itself, keeps the check
// free of key-dependent timing.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export type KeyKind = 'node' | 'reader' | 'user' | 'session' | 'job';
const PREFIX: Record<KeyKind, string> = { node: 'nk_', reader: 'rk_', user: 'uk_', session: 'ns_', job: 'jk_' };
const KINDS = Object.entries(PREFIX) as [KeyKind, string][];

export function hashKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/** Whether `key` is the key whose SHA-256 is `hash`, without key-dependent timing. */
export function isKeyOf(key: string, hash: string): boolean {
  return key.length > 0 && timingSafeEqual(Buffer.from(hashKey(key)), Buffer.from(hash));
}

/** Random bytes drawn 128 keys at a time: one call to the CSPRNG costs 20 times what taking 32 bytes from a batch does (a job key is made per lease). */
const KEY_BYTES = 32;
let batch = Buffer.alloc(0);
let taken = 0;

function randomKeyText(): string {
  if (taken + KEY_BYTES > batch.length) {
    batch = randomBytes(KEY_BYTES * 128);
    taken = 0;
  }
  const text = batch.toString('base64url', taken, taken + KEY_BYTES);
  // Handed out once: the bytes do not stay in memory after use.
  batch.fill(0, taken, taken + KEY_BYTES);
  taken += KEY_BYTES;
  return text;
}

export function newKey(kind: KeyKind): { key: string; hash: string } {
  const key = PREFIX[kind] + randomKeyText();
  return { key, hash: hashKey(key) };
}

const WELL_FORMED = /^[a-z]{2}_[A-Za-z0-9_-]{43}$/;

/** A key as newKey() makes them: its prefix, then 32 random bytes in base64url. */
export const isWellFormedKey = (key: string): boolean => WELL_FORMED.test(key);

/** The kind a key's prefix tells; undefined for keys without one (imported node keys). */
export function keyKind(key: string): KeyKind | undefined {
  for (const [kind, prefix] of KINDS) if (key.startsWith(prefix)) return kind;
  return undefined;
}
