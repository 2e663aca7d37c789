// A node's verified days on the dashboard: the closed days of the points ledger (GET
// /ledger/days) with the node's signed total, each checked here, in the browser, with the
// same code `ins ledger verify` uses (src/ledger-format): the day's Ed25519 signature against
// the key the service publishes (WebCrypto), the chain of roots, the node's leaf in the day's
// tree (its proof, or the proof it has none) and its entries against that leaf. What it proves:
// the points of those days are what the service signed when it closed them, entry by entry.
// Not that the service counted right, and not against a key you noted elsewhere (the page
// trusts /ledger/key; `ins ledger verify --key-id` does not).
import { sha256 } from '@noble/hashes/sha2.js';
import { checkAbsence, checkChain, checkInclusion, checkNodeEntries, type SignedDay } from '../../src/ledger-format/check.js';
import type { Difference } from '../../src/ledger-format/day.js';
import { subtractDecimal } from '../../src/ledger-format/decimal.js';
import { compareEntries, fromHex, type Entry, type NodeLeaf } from '../../src/ledger-format/encoding.js';

interface Proof {
  index: number;
  size: number;
  path: string[];
}
interface NodeDay {
  day: SignedDay;
  node: (NodeLeaf & { points: string }) | null;
  proof: Proof | null;
  digests: string;
  entries: Entry[];
  absence: { left: { node: NodeLeaf; proof: Proof } | null; right: { node: NodeLeaf; proof: Proof } | null } | null;
}
export interface VerifiedDay {
  day: string;
  points: string;
  entries: number;
  verified: boolean;
  problem?: string;
}

const $ = (id: string): HTMLElement => document.getElementById(id)!;
const fromBase64 = (s: string): Uint8Array<ArrayBuffer> => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
/** A copy WebCrypto accepts (its types want an ArrayBuffer, not a view of a shared one). */
const own = (b: Uint8Array): Uint8Array<ArrayBuffer> => new Uint8Array(b);
const fmt = new Intl.NumberFormat('en', { maximumFractionDigits: 6 });

async function json<T>(path: string, key?: string): Promise<T> {
  const res = await fetch(path, key ? { headers: { api_key: key } } : {});
  if (!res.ok) throw new Error(`${path}: ${res.status}`);
  return res.json() as Promise<T>;
}

/** Checks the node's closed days among the last `lastDays`; newest first. */
export async function verifyDays(node: string, key: string, lastDays: number): Promise<{ keyId: string; days: VerifiedDay[] }> {
  const published = await json<{ key_id: string; public_key: string }>('ledger/key');
  const publicKey = await crypto.subtle.importKey('raw', fromBase64(published.public_key), { name: 'Ed25519' }, false, ['verify']);
  const verify = (m: Uint8Array, signature: string) => crypto.subtle.verify({ name: 'Ed25519' }, publicKey, fromBase64(signature), own(m));
  const oldest = new Date(Date.now() - (lastDays - 1) * 86_400_000).toISOString().slice(0, 10);
  const listing = await json<{ first_day: string | null; days: SignedDay[] }>(`ledger/days?last_days=${lastDays + 1}`);
  const days = listing.days.filter((d) => d.day >= oldest);
  const before = listing.days.filter((d) => d.day < oldest).at(-1);
  const problems = new Map<string, Difference[]>();
  for (const d of await checkChain(days, published.key_id, verify, before, listing.first_day ?? undefined))
    problems.set(d.day, [...(problems.get(d.day) ?? []), d]);
  const out: VerifiedDay[] = [];
  for (const d of [...days].reverse()) {
    const r = await json<NodeDay>(`ledger/days/${d.day}/nodes/${encodeURIComponent(node)}`, key);
    const found = problems.get(d.day) ?? [];
    if (r.day.root !== d.root || r.day.signature !== d.signature) found.push({ day: d.day, what: 'the node view answers another signed record' });
    const entries = r.entries;
    for (const e of entries) {
      e.node = node;
      e.reason ??= '';
    }
    entries.sort(compareEntries);
    if (r.node) {
      if (!r.proof || !checkInclusion(sha256, d, r.node, r.proof)) found.push({ day: d.day, what: "the node's leaf is not in the signed tree" });
      found.push(...checkNodeEntries(sha256, d.day, { ...r.node, digests: fromHex(r.digests) }, { name: node, entries }));
    } else {
      if (!r.absence || !checkAbsence(sha256, d, node, r.absence)) found.push({ day: d.day, what: 'no leaf, and no valid proof of that' });
      found.push(...checkNodeEntries(sha256, d.day, undefined, { name: node, entries }));
    }
    out.push({
      day: d.day,
      points: r.node ? subtractDecimal(r.node.credited, r.node.reversed) : '0',
      entries: entries.length,
      verified: found.length === 0,
      ...(found.length ? { problem: `${found[0]!.entry ? `entry ${found[0]!.entry}: ` : ''}${found[0]!.what}` } : {}),
    });
  }
  return { keyId: published.key_id, days: out };
}

/** The verified days under the node's points; `served` is what daily_points answered, by day. */
export async function showVerifiedDays(node: string, key: string, lastDays: number, served: Map<string, number>): Promise<void> {
  const section = $('node-ledger');
  const body = $('ledger-table').querySelector('tbody')!;
  try {
    const { keyId, days } = await verifyDays(node, key, lastDays);
    const cell = (text: string, className?: string) =>
      Object.assign(document.createElement('td'), { textContent: text, ...(className ? { className } : {}) });
    // The signed total must also be what daily_points says today.
    for (const d of days) {
      const points = served.get(d.day);
      if (!d.problem && points !== undefined && points !== Number(d.points))
        Object.assign(d, { verified: false, problem: `daily_points says ${fmt.format(points)}, the signed total ${d.points}` });
    }
    body.replaceChildren(
      ...days.map((d) => {
        const problem = d.problem;
        const tr = document.createElement('tr');
        tr.dataset.day = d.day;
        tr.dataset.verified = String(!problem);
        tr.append(
          cell(d.day),
          cell(fmt.format(Number(d.points))),
          cell(String(d.entries)),
          cell(problem ? `✗ ${problem}` : '✓ verified', problem ? 'bad' : 'good'),
        );
        return tr;
      }),
    );
    $('ledger-summary').textContent =
      days.length === 0
        ? 'No day in this range is closed yet: a day closes once it ended and the window in which verification may still take credits back has passed.'
        : `${days.filter((d) => d.verified).length} of ${days.length} closed days verified in this browser, signed by key ${keyId}.`;
    section.hidden = false;
  } catch {
    section.hidden = true;
  }
}
