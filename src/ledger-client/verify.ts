// `ins ledger verify --server URL`: a node operator's check of the service's points ledger from
// their own machine, with nothing but the URL (and a key). A client of the wire only, like
// ins worker: it imports no server layer (lint). What it checks (docs/ledger.md, "Checking"):
// - always: the published key, every signature and the chain of roots over the last N days;
// - no key: each day's node leaves (public per-node totals) give its signed root;
// - a node and its key (or a reader key): the node's leaf is in each day's tree (or provably
//   absent), its entries now give that leaf, and daily_points and unique_nodes agree;
// - a reader key alone: every day's export recomputed — every root, total and entry — and
//   daily_points of every node and unique_nodes of every model against it.
import { setTimeout as sleep } from 'node:timers/promises';
import { createPublicKey, hash, verify as verifyEd25519 } from 'node:crypto';
import {
  checkAbsence,
  checkChain,
  checkDayEntries,
  checkInclusion,
  checkLeaves,
  checkNodeEntries,
  type NodeEntries,
  type SignedDay,
} from '../ledger-format/check.js';
import type { Difference } from '../ledger-format/day.js';
import { subtractDecimal } from '../ledger-format/decimal.js';
import { compareEntries, fromHex, nextDay, toHex, type Entry, type NodeLeaf, type Sha256 } from '../ledger-format/encoding.js';

const sha256: Sha256 = (data) => hash('sha256', data, 'buffer');

export interface VerifyOptions {
  server: string;
  node?: string;
  key?: string;
  days: number;
  /** The key id the operator noted earlier: any other published key is a difference. */
  keyId?: string;
  /** Told each time the service's rate limit makes the check wait (429 with Retry-After). */
  waiting?: (seconds: number, path: string) => void;
}

/** The longest Retry-After the check waits in one go (the service's windows are a minute). */
const MAX_WAIT_SECONDS = 120;
/** 429s in a row for one request before the check gives up (a limit that never lets it through). */
const MAX_WAITS = 10;

export interface VerifyReport {
  mode: 'public' | 'node' | 'export';
  keyId: string;
  days: string[];
  differences: Difference[];
  /** What was compared, for the summary line. */
  compared: string[];
}

export class LedgerHttpError extends Error {
  constructor(
    readonly status: number,
    readonly detail: unknown,
    path: string,
  ) {
    super(`${path}: HTTP ${status}${typeof detail === 'string' ? ` (${detail})` : ''}`);
  }
}

interface LedgerDayJson extends SignedDay {
  closed_at: string;
}
interface LeafJson extends NodeLeaf {
  index: number;
  points: string;
}
interface ProofJson {
  index: number;
  size: number;
  path: string[];
}
type EntryJson = Omit<Entry, 'node' | 'reason'> & { reason?: string };
interface NodeDayJson {
  day: LedgerDayJson;
  node: LeafJson | null;
  proof: ProofJson | null;
  digests: string;
  entries: EntryJson[];
  absence: { left: { node: LeafJson; proof: ProofJson } | null; right: { node: LeafJson; proof: ProofJson } | null } | null;
}

class Client {
  constructor(
    private readonly base: string,
    private readonly key?: string,
    private readonly waiting: NonNullable<VerifyOptions['waiting']> = () => {},
  ) {}

  async request(path: string, init: RequestInit = {}): Promise<Response> {
    let res: Response;
    // A network of more nodes than the service's per-key read limit (RATE_LIMIT_READS_PER_KEY,
    // one daily_points a node) is checked by waiting as the service says, not by failing.
    for (let waits = 0; ; waits++) {
      res = await fetch(new URL(path.replace(/^\//, ''), this.base.endsWith('/') ? this.base : `${this.base}/`), {
        ...init,
        headers: { ...(this.key ? { api_key: this.key } : {}), ...(init.headers as Record<string, string> | undefined) },
      });
      if (res.status !== 429 || waits === MAX_WAITS) break;
      await res.body?.cancel();
      const seconds = Math.min(MAX_WAIT_SECONDS, Math.max(1, Number(res.headers.get('retry-after')) || 1));
      this.waiting(seconds, path);
      await sleep(seconds * 1000);
    }
    if (!res.ok) {
      const body = (await res.json().catch(() => null)) as { detail?: unknown } | null;
      throw new LedgerHttpError(res.status, body?.detail, path);
    }
    return res;
  }

  async json<T>(path: string, init?: RequestInit): Promise<T> {
    return (await this.request(path, init)).json() as Promise<T>;
  }

  /** The lines of a streamed response, one at a time. */
  async *lines(path: string): AsyncGenerator<string> {
    const res = await this.request(path);
    const decoder = new TextDecoder();
    let buf = '';
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        yield buf.slice(0, nl);
        buf = buf.slice(nl + 1);
      }
    }
    if (buf) yield buf;
  }
}

const header = (d: LedgerDayJson): SignedDay => ({
  day: d.day,
  previous_root: d.previous_root,
  root: d.root,
  nodes: d.nodes,
  entries: d.entries,
  credits: d.credits,
  credited: d.credited,
  reversals: d.reversals,
  reversed: d.reversed,
  key_id: d.key_id,
  signature: d.signature,
});
const sameHeader = (a: SignedDay, b: SignedDay): boolean => JSON.stringify(header(a as LedgerDayJson)) === JSON.stringify(header(b as LedgerDayJson));
const endOf = (day: string) => `${day}T23:59:59.999999Z`;

/** Runs the checks; throws LedgerHttpError when the service refuses (a bad key, an unknown node). */
export async function verifyLedger(o: VerifyOptions): Promise<VerifyReport> {
  const client = new Client(o.server, o.key, o.waiting);
  const published = await client.json<{ key_id: string; public_key: string }>('/ledger/key');
  const publicKey = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(published.public_key, 'base64').toString('base64url') },
    format: 'jwk',
  });
  const keyIdNow = toHex(sha256(Buffer.from(published.public_key, 'base64')).subarray(0, 8));
  const differences: Difference[] = [];
  const mode = o.key === undefined ? 'public' : o.node !== undefined ? 'node' : 'export';
  const report: VerifyReport = { mode, keyId: keyIdNow, days: [], differences, compared: [] };
  if (keyIdNow !== published.key_id) differences.push({ day: '-', what: `the published key_id ${published.key_id} is not its key's (${keyIdNow})` });
  if (o.keyId && o.keyId !== keyIdNow)
    differences.push({ day: '-', what: `the service now publishes key ${keyIdNow}, not ${o.keyId}: another chain` });

  const listing = await client.json<{ first_day: string | null; days: LedgerDayJson[] }>(`/ledger/days?last_days=${o.days + 1}`);
  const all = listing.days.map(header);
  const days = all.length > o.days ? all.slice(1) : all;
  const before = all.length > o.days ? all[0] : undefined;
  report.days = days.map((d) => d.day);
  if (days.length === 0) return report;
  const verify = (m: Uint8Array, signature: string) => verifyEd25519(null, m, publicKey, Buffer.from(signature, 'base64'));
  differences.push(...(await checkChain(days, keyIdNow, verify, before, listing.first_day ?? undefined)));
  report.compared.push('signatures and chain');

  if (mode === 'public') {
    for (const d of days) {
      const detail = await client.json<LedgerDayJson & { node_totals: LeafJson[] }>(`/ledger/days/${d.day}`);
      if (!sameHeader(detail, d)) differences.push({ day: d.day, what: 'the day answers another signed record than the listing' });
      differences.push(...checkLeaves(sha256, d, detail.node_totals));
      for (const l of detail.node_totals)
        if (l.points !== subtractDecimal(l.credited, l.reversed))
          differences.push({ day: d.day, node: l.name, what: `points ${l.points} is not credited − reversed` });
    }
    report.compared.push('per-node totals against the roots');
  } else if (mode === 'node') {
    await verifyNode(client, o.node!, days, differences);
    report.compared.push(`the node's proofs and entries`, 'daily_points', 'unique_nodes');
  } else {
    await verifyExport(client, days, differences);
    report.compared.push('every entry, root and total (the export)', 'daily_points', 'unique_nodes');
  }
  return report;
}

/** Model → node → credits and reversals seen in the checked days. */
type Activity = Map<string, Map<string, { credits: number; reversals: number }>>;

function note(activity: Activity, e: Entry): void {
  const byNode = activity.get(e.model) ?? new Map<string, { credits: number; reversals: number }>();
  activity.set(e.model, byNode);
  const n = byNode.get(e.node) ?? { credits: 0, reversals: 0 };
  byNode.set(e.node, n);
  if (e.kind === 'credit') n.credits++;
  else n.reversals++;
}

async function verifyNode(client: Client, name: string, days: SignedDay[], differences: Difference[]): Promise<void> {
  const activity: Activity = new Map();
  const nets = new Map<string, string>();
  // Each day is checked as soon as its answer arrives, while the server answers the next ones:
  // the hashing here and the reading there overlap. Differences are kept per day, in day order.
  const perDay: Difference[][] = days.map(() => []);
  await inParallel(
    days.map((d, i) => [d, i] as const),
    8,
    async ([d, i]) => {
      const r = await client.json<NodeDayJson>(`/ledger/days/${d.day}/nodes/${encodeURIComponent(name)}`);
      const found = perDay[i]!;
      if (!sameHeader(r.day, d)) found.push({ day: d.day, what: 'the node view answers another signed record than the listing' });
      // The entries as parsed, completed in place (no copy of thousands of objects), in canonical order.
      const entries = r.entries as Entry[];
      for (const e of entries) {
        e.node = name;
        e.reason ??= '';
      }
      entries.sort(compareEntries);
      for (const e of entries) note(activity, e);
      if (r.node) {
        if (!r.proof || !checkInclusion(sha256, d, r.node, r.proof))
          found.push({ day: d.day, node: name, what: "its leaf is not in the day's signed tree (the proof fails)" });
        const digests = fromHex(r.digests);
        if (toHex(sha256(digests)) !== r.node.digests_hash)
          found.push({ day: d.day, node: name, what: 'the digests served are not the signed ones' });
        found.push(...checkNodeEntries(sha256, d.day, { ...r.node, digests }, { name, entries }));
        nets.set(d.day, subtractDecimal(r.node.credited, r.node.reversed));
      } else {
        if (!r.absence || !checkAbsence(sha256, d, name, r.absence))
          found.push({ day: d.day, node: name, what: 'no leaf, and no valid proof that it had none' });
        found.push(...checkNodeEntries(sha256, d.day, undefined, { name, entries }));
      }
    },
  );
  for (const found of perDay) differences.push(...found);
  await compareDailyPoints(client, name, days, nets, differences);
  await compareUniqueNodes(client, days, activity, differences, name);
}

async function verifyExport(client: Client, days: SignedDay[], differences: Difference[]): Promise<void> {
  const activity: Activity = new Map();
  const nets = new Map<string, Map<string, string>>();
  for (const d of days) {
    const lines = client.lines(`/ledger/days/${d.day}/export?format=jsonl`);
    const first = await lines.next();
    const head = first.done ? undefined : (JSON.parse(first.value) as LedgerDayJson & { type: string });
    if (!head || head.type !== 'day' || !sameHeader(head, d)) {
      differences.push({ day: d.day, what: 'the export does not start with the signed day' });
      continue;
    }
    const signed = new Map<string, NodeLeaf & { digests?: Uint8Array }>();
    let complete = false;
    async function* nodes(): AsyncGenerator<NodeEntries> {
      let current: NodeEntries | undefined;
      for await (const line of lines) {
        const item = JSON.parse(line) as { type: string } & Record<string, unknown>;
        if (item.type === 'end') {
          complete = true;
          break;
        }
        if (item.type === 'node') {
          const { type: _t, digests, index: _i, points: _p, ...leaf } = item as unknown as LeafJson & { type: string; digests: string };
          const bytes = fromHex(digests);
          if (toHex(sha256(bytes)) !== leaf.digests_hash)
            differences.push({ day: d.day, node: leaf.name, what: 'the digests served are not the signed ones' });
          signed.set(leaf.name, { ...leaf, digests: bytes });
          continue;
        }
        const { type: _t, ...e } = item as unknown as Entry & { type: string };
        const entry: Entry = { ...e, reason: e.reason ?? '' };
        note(activity, entry);
        if (current && current.name !== entry.node) {
          yield current;
          current = undefined;
        }
        current ??= { name: entry.node, entries: [] };
        current.entries.push(entry);
      }
      if (current) yield current;
    }
    differences.push(...(await checkDayEntries(sha256, d, signed, nodes())));
    if (!complete) differences.push({ day: d.day, what: 'the export was cut short' });
    differences.push(...checkLeaves(sha256, d, [...signed.values()]));
    for (const l of signed.values()) {
      const byNode = nets.get(l.name) ?? new Map<string, string>();
      nets.set(l.name, byNode);
      byNode.set(d.day, subtractDecimal(l.credited, l.reversed));
    }
  }
  await inParallel([...nets.keys()], 8, (name) => compareDailyPoints(client, name, days, nets.get(name)!, differences));
  await compareUniqueNodes(client, days, activity, differences);
}

/** daily_points of the node for each checked day against the signed net totals (0 on days it has no leaf). */
async function compareDailyPoints(
  client: Client,
  name: string,
  days: SignedDay[],
  nets: Map<string, string>,
  differences: Difference[],
): Promise<void> {
  const today = new Date().toISOString().slice(0, 10);
  const span = Math.round((Date.parse(`${today}T00:00:00Z`) - Date.parse(`${days[0]!.day}T00:00:00Z`)) / 86_400_000) + 1;
  const served = await client.json<{ date: string; points: number }[]>('/daily_points', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ node_name: name, last_days: Math.min(366, span) }),
  });
  const byDay = new Map(served.map((p) => [p.date, p.points]));
  for (const d of days) {
    const points = byDay.get(d.day);
    if (points === undefined) continue;
    const net = nets.get(d.day) ?? '0';
    if (points !== Number(net)) differences.push({ day: d.day, node: name, what: `daily_points answers ${points}, the signed total is ${net}` });
  }
}

/**
 * unique_nodes over the checked days, per model seen: a node it names must have a credit for
 * the model in those days, and a node with more credits than reversals for it must be named
 * (unless a reversal made after the last closed day took the rest back).
 */
async function compareUniqueNodes(client: Client, days: SignedDay[], activity: Activity, differences: Difference[], only?: string): Promise<void> {
  const from = days[0]!.day;
  const to = days.at(-1)!.day;
  const span = from === to ? from : `${from}…${to}`;
  await inParallel([...activity.keys()], 8, async (model) => {
    const q = new URLSearchParams({ model_name: model, start_date: `${from}T00:00:00Z`, end_date: endOf(to) });
    const { nodes } = await client.json<{ nodes: string[] }>(`/unique_nodes?${q}`);
    const byNode = activity.get(model)!;
    const named = new Set(only === undefined ? nodes : nodes.filter((n) => n === only));
    for (const n of named) {
      if (!byNode.get(n)?.credits)
        differences.push({ day: span, node: n, what: `unique_nodes names it for ${model}, but the ledger has no credit of it for that model` });
    }
    for (const [n, a] of byNode) {
      if (a.credits > a.reversals && !named.has(n))
        differences.push({
          day: span,
          node: n,
          what: `unique_nodes leaves it out for ${model}, but the ledger has ${a.credits - a.reversals} of its credits for that model not taken back (unless a reversal since ${nextDay(to)} did)`,
        });
    }
  });
}

async function inParallel<T, R>(items: T[], width: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!);
      }
    }),
  );
  return out;
}
