// `ins ledger verify` without --server: on the operator's machine, the database itself against
// its closed days — signatures and chain, the ledger's own rows against the signed roots,
// every entry recomputed from job_results and point_reversals, and daily_points
// (node_daily_points) against the signed totals. Read-only.
import { sql, type Database } from '../db/database.js';
import { checkChain, checkDayEntries, checkLeaves, type NodeEntries } from '../ledger-format/check.js';
import { subtractDecimal } from '../ledger-format/decimal.js';
import { fromHex, type Entry, type NodeLeaf } from '../ledger-format/encoding.js';
import type { Difference } from '../ledger-format/day.js';
import { DayEntries } from './entries.js';
import { sha256 } from './hash.js';
import { verifySignature } from './keys.js';
import { LedgerReader, type ClosedDay } from './read.js';

const KEY = sql('ledger_check_key', `SELECT key_id, encode(public_key, 'base64') AS public_key FROM ledger_key`);
const DIGESTS = sql('ledger_check_digests', `SELECT name, encode(digests, 'hex') AS digests FROM ledger_day_nodes WHERE day = $1::date`);
const DAILY = sql(
  'ledger_check_daily',
  `SELECT n.name, trim_scale(d.points)::text AS points FROM node_daily_points d JOIN nodes n ON n.id = d.node_id
  WHERE d.day = $1::date AND d.points <> 0`,
);

export interface CheckReport {
  days: string[];
  differences: Difference[];
}

export async function checkDatabase(db: Database, lastDays: number): Promise<CheckReport> {
  const [key] = await db.query<{ key_id: string; public_key: string }>(KEY);
  const reader = new LedgerReader(db, 0);
  const days = await reader.lastDays(lastDays + 1);
  const { first_day } = await reader.status();
  const checked = days.length > lastDays ? days.slice(1) : days;
  const before = days.length > lastDays ? days[0] : undefined;
  if (!key || checked.length === 0) return { days: [], differences: [] };
  const verify = (m: Uint8Array, signature: string) => verifySignature(key.public_key, m, Buffer.from(signature, 'base64'));
  const differences = await checkChain(checked, key.key_id, verify, before, first_day ?? undefined);
  const { closed_through } = await reader.status();
  if (closed_through && checked.at(-1)!.day !== closed_through)
    differences.push({ day: closed_through, what: 'closed, but it has no signed record' });
  for (const header of checked) differences.push(...(await checkDay(db, reader, header)));
  return { days: checked.map((d) => d.day), differences };
}

async function checkDay(db: Database, reader: LedgerReader, header: ClosedDay): Promise<Difference[]> {
  const leaves = await reader.nodeTotals(header.day);
  const out = checkLeaves(sha256, header, leaves);
  const digests = new Map((await db.query<{ name: string; digests: string }>(DIGESTS, [header.day])).map((r) => [r.name, fromHex(r.digests)]));
  const signed = new Map<string, NodeLeaf & { digests?: Uint8Array }>(leaves.map((l) => [l.name, { ...l, digests: digests.get(l.name) }]));
  const source = new DayEntries(db, header.day);
  async function* nodes(): AsyncGenerator<NodeEntries> {
    let entries: Entry[] = [];
    for await (const chunk of source.chunks(await source.nodes())) {
      entries.push(...chunk.entries);
      if (!chunk.done) continue;
      yield { name: chunk.node.name, entries };
      entries = [];
    }
  }
  out.push(...(await checkDayEntries(sha256, header, signed, nodes())));
  // daily_points of the day: each node's net points as signed.
  const daily = new Map((await db.query<{ name: string; points: string }>(DAILY, [header.day])).map((r) => [r.name, r.points]));
  for (const l of leaves) {
    const net = subtractDecimal(l.credited, l.reversed);
    const served = daily.get(l.name) ?? '0';
    daily.delete(l.name);
    if (served !== net) out.push({ day: header.day, node: l.name, what: `daily_points is ${served}, the ledger's total ${net}` });
  }
  for (const [name, points] of daily)
    out.push({ day: header.day, node: name, what: `daily_points is ${points}, the ledger has no entry for this node` });
  return out;
}
