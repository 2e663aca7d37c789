// The ledger's canonical encoding (docs/ledger.md is the specification; this is its one
// implementation, shared by the server that signs, `ins ledger verify` and the dashboard that
// check): entries, their order, leaf bytes, node leaves, the signed message. Nothing here
// imports Node: the SHA-256 function is passed in (node:crypto on the server, @noble/hashes in
// the browser).

export type Sha256 = (data: Uint8Array) => Uint8Array;

export type EntryKind = 'credit' | 'reversal';

/** One ledger entry: a credit (a success received that day) or a reversal (points taken back). */
export interface Entry {
  kind: EntryKind;
  job_id: string;
  node: string;
  model: string;
  /** Canonical decimal (decimal.ts). */
  points: string;
  /** Credit: when the report was received; reversal: when it was made. YYYY-MM-DDTHH:MM:SS.ffffffZ. */
  time: string;
  /** Why a reversal was made ('' for credits). */
  reason: string;
}

/** A node's totals on a day: credits and their points, reversals and theirs. */
export interface NodeTotals {
  credits: number;
  credited: string;
  reversals: number;
  reversed: string;
}

/** A node's leaf of a day's tree. Hashes are lowercase hex. */
export interface NodeLeaf extends NodeTotals {
  name: string;
  entries_root: string;
  digests_hash: string;
}

/** What a day's signature covers. */
export interface DayHeader {
  day: string;
  previous_root: string;
  root: string;
  nodes: number;
  entries: number;
  credits: number;
  credited: string;
  reversals: number;
  reversed: string;
}

export const TIME_PATTERN = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
export const DAY_PATTERN = /^\d{4}-\d{2}-\d{2}$/;
/** The previous root of the first day. */
export const ZERO_ROOT = '0'.repeat(64);
/** Bytes of an entry's digest: the start of its leaf hash. */
export const DIGEST_BYTES = 8;

const PREFIX_ENTRY = 0x00;
export const PREFIX_INTERIOR = 0x01;
const PREFIX_NODE = 0x02;

/** Compares by Unicode code point (= UTF-8 bytes = PostgreSQL's "C" collation), not UTF-16 units. */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    // Surrogates (0xD800–0xDFFF) encode code points above 0xFFFF: they sort after the rest.
    const sx = x >= 0xd800 && x <= 0xdfff;
    const sy = y >= 0xd800 && y <= 0xdfff;
    if (sx !== sy) return sx ? 1 : -1;
    return x - y;
  }
  return a.length - b.length;
}

/** The canonical order of a node's entries on a day: credits first, then by time, then by job id. */
export function compareEntries(a: Entry, b: Entry): number {
  if (a.kind !== b.kind) return a.kind === 'credit' ? -1 : 1;
  if (a.time !== b.time) return a.time < b.time ? -1 : 1;
  return compareCodePoints(a.job_id, b.job_id);
}

export const entryName = (e: Pick<Entry, 'kind' | 'job_id'>): string => `${e.kind} ${e.job_id}`;

const encoder = new TextEncoder();
let scratch = new Uint8Array(1024);

/** Grows the scratch buffer to `need` bytes, keeping its first `keep`. */
function ensure(need: number, keep: number): void {
  if (need <= scratch.length) return;
  const bigger = new Uint8Array(Math.max(need, scratch.length * 2));
  bigger.set(scratch.subarray(0, keep));
  scratch = bigger;
}

/** Writes F(s) = uint32 big-endian byte length, then the UTF-8 bytes, at `at`; returns the end. */
function field(s: string, at: number): number {
  ensure(at + 4 + s.length * 3, at);
  // ASCII (job ids, names and numbers mostly are) is copied by hand: cheaper than encodeInto.
  let written = 0;
  for (; written < s.length; written++) {
    const c = s.charCodeAt(written);
    if (c > 0x7f) break;
    scratch[at + 4 + written] = c;
  }
  if (written < s.length) written = encoder.encodeInto(s, scratch.subarray(at + 4)).written;
  scratch[at] = written >>> 24;
  scratch[at + 1] = (written >>> 16) & 0xff;
  scratch[at + 2] = (written >>> 8) & 0xff;
  scratch[at + 3] = written & 0xff;
  return at + 4 + written;
}

function fields(prefix: number, values: string[]): number {
  scratch[0] = prefix;
  let at = 1;
  for (const v of values) at = field(v, at);
  return at;
}

/** The bytes an entry's leaf hash is made of (docs/ledger.md, "Entries"). */
export function entryBytes(e: Entry): Uint8Array {
  return scratch.slice(0, fields(PREFIX_ENTRY, [e.kind, e.job_id, e.node, e.model, e.points, e.time, e.reason]));
}

export function entryLeafHash(sha: Sha256, e: Entry): Uint8Array {
  return sha(scratch.subarray(0, fields(PREFIX_ENTRY, [e.kind, e.job_id, e.node, e.model, e.points, e.time, e.reason])));
}

export function nodeLeafHash(sha: Sha256, n: NodeLeaf): Uint8Array {
  let at = fields(PREFIX_NODE, [n.name, String(n.credits), n.credited, String(n.reversals), n.reversed]);
  const tail = fromHex(n.entries_root + n.digests_hash);
  if (tail.length !== 64) throw new Error('entries_root and digests_hash are 32 bytes each');
  ensure(at + 64, at);
  scratch.set(tail, at);
  at += 64;
  return sha(scratch.subarray(0, at));
}

/** The text a day's Ed25519 signature is over (UTF-8 bytes of it). */
export function signedMessage(h: DayHeader): string {
  return [
    'ins-ledger-day/1',
    `day=${h.day}`,
    `previous=${h.previous_root}`,
    `root=${h.root}`,
    `nodes=${h.nodes}`,
    `entries=${h.entries}`,
    `credits=${h.credits}`,
    `credited=${h.credited}`,
    `reversals=${h.reversals}`,
    `reversed=${h.reversed}`,
  ].join('\n');
}

export const signedBytes = (h: DayHeader): Uint8Array => encoder.encode(signedMessage(h));

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));
const NIBBLE = new Int8Array(128).fill(-1);
for (let i = 0; i < 16; i++) NIBBLE['0123456789abcdef'.charCodeAt(i)] = i;

export function toHex(bytes: Uint8Array): string {
  let s = '';
  for (let i = 0; i < bytes.length; i++) s += HEX[bytes[i]!];
  return s;
}

export function fromHex(hex: string): Uint8Array {
  if (hex.length % 2 !== 0) throw new Error('not lowercase hex');
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) {
    const hi = NIBBLE[hex.charCodeAt(i * 2)] ?? -1;
    const lo = NIBBLE[hex.charCodeAt(i * 2 + 1)] ?? -1;
    if (hi < 0 || lo < 0) throw new Error('not lowercase hex');
    out[i] = hi * 16 + lo;
  }
  return out;
}

export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The next UTC day (YYYY-MM-DD). */
export function nextDay(day: string, by = 1): string {
  return new Date(Date.parse(`${day}T00:00:00Z`) + by * 86_400_000).toISOString().slice(0, 10);
}

/** A real calendar day in YYYY-MM-DD (years 1–9999). */
export function isDay(s: string): boolean {
  if (!DAY_PATTERN.test(s) || s.startsWith('0000')) return false;
  const d = new Date(`${s}T00:00:00Z`);
  return !Number.isNaN(d.getTime()) && d.toISOString().slice(0, 10) === s;
}
