// API keys: 32 random bytes, base64url, behind a prefix that tells the kind so logs and
// support read themselves (nk_ node key, rk_ reader key). Only the SHA-256 is stored; random
// keys of this size need no slow hash. Looking a key up by its hash, never comparing the key
// itself, keeps the check free of key-dependent timing.
import { createHash, randomBytes } from 'node:crypto';

export type KeyKind = 'node' | 'reader';
const PREFIX: Record<KeyKind, string> = { node: 'nk_', reader: 'rk_' };

export function hashKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

export function newKey(kind: KeyKind): { key: string; hash: string } {
  const key = PREFIX[kind] + randomBytes(32).toString('base64url');
  return { key, hash: hashKey(key) };
}

export function keyKind(key: string): KeyKind | undefined {
  if (key.startsWith(PREFIX.node)) return 'node';
  if (key.startsWith(PREFIX.reader)) return 'reader';
  return undefined;
}
