// Closing days (docs/ledger.md, "Closing"): once a UTC day ended and the evidence window has
// passed since its end (the time verification may still reverse its credits), its entries are
// recomputed, node by node, into node leaves and a root, and the day is signed and chained to
// the day before. Days close in order, each once.
//
// Two phases, so that a day of millions of entries never holds a lock while it is read:
// 1. compute, outside any transaction: pages of entries by keyset; each node's leaf (with its
//    digests) goes to ledger_pending_nodes as soon as it is done;
// 2. commit, one short transaction: ledger_state FOR UPDATE (reversals and imports hold it
//    FOR SHARE while they write, so those in flight finish first and later ones see the day
//    closed), then the day's entries are counted again. A day's entries only ever grow (credits
//    are never un-received, reversals never removed), so equal counts mean the pages saw
//    exactly today's entries; different counts mean something landed meanwhile, and the day is
//    computed again. Then the day is signed, its rows written and closed_through moved.
//
// Slices (pace.ts): a server closing at start yields between steps — after each page of
// entries, each batch of pending node rows, each day — so that live traffic keeps most of the
// machine; no step that waits holds a lock or a transaction. Pacing changes when the work is
// done, never what it reads: the commit's re-count still decides.
//
// Several servers: a claim (ledger_state.claimed_by/claimed_until, renewed while computing)
// lets one compute while the others skip; the commit's row lock and its check of
// closed_through make closing idempotent even when a claim lapsed.
import { sql, type Database } from '../db/database.js';
import { DayAccumulator, NodeAccumulator, type DayTotals, type NodeSummary } from '../ledger-format/day.js';
import { signedBytes, toHex, ZERO_ROOT, type DayHeader } from '../ledger-format/encoding.js';
import { DayEntries, PAGE } from './entries.js';
import { sha256 } from './hash.js';
import type { LedgerKey } from './keys.js';

export interface CloseOptions {
  key: LedgerKey;
  /** Seconds after a day's end before it closes: the evidence window (VERIFY_EVIDENCE_WINDOW). */
  window: number;
  /** This server, for the claim. */
  server: string;
  pageSize?: number;
  /** Tests: runs inside the commit transaction, after the lock and the re-count. */
  beforeCommit?: (day: string) => Promise<void>;
  /** Tests: runs between computing a day and committing it. */
  afterCompute?: (day: string) => Promise<void>;
  /** Asked between pages: true makes the close give up (ClosingStopped) — the server is stopping. */
  stopping?: () => boolean;
  /** Asked between steps (pace.ts): the server rests there so that live traffic goes first. Unset: no rest. */
  pace?: () => Promise<void>;
}

export class ClosingStopped extends Error {}

export interface CloseReport {
  closed: string[];
  /** Days computed again because entries landed while they were read. */
  recomputed: number;
  /** Nodes whose daily_points disagreed with the entries of a day closed now (aggregates changed by hand?). */
  disagreements: { day: string; node: string; ledger: string; dailyPoints: string }[];
}

const CLAIM_SECONDS = 600;
const MAX_ATTEMPTS = 5;

const NEXT = sql(
  'ledger_next_day',
  `SELECT d::text AS day,
    d IS NOT NULL AND ((d + 1)::timestamp AT TIME ZONE 'UTC') + make_interval(secs => $1::float8) <= now() AS due
  FROM (SELECT coalesce(s.closed_through + 1,
    least((SELECT min(day) FROM node_daily_points), (SELECT min(day) FROM point_reversals))) AS d FROM ledger_state s) x`,
);
const CLAIM = sql(
  'ledger_claim',
  `UPDATE ledger_state SET claimed_by = $1::text, claimed_until = now() + make_interval(secs => $2::float8)
  WHERE claimed_until IS NULL OR claimed_until < now() OR claimed_by = $1::text RETURNING true AS claimed`,
);
const RELEASE = sql('ledger_release', 'UPDATE ledger_state SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = $1::text');
const CLEAR_PENDING = sql('ledger_clear_pending', 'DELETE FROM ledger_pending_nodes WHERE day = $1::date AND server = $2::text');
const ADD_PENDING = sql(
  'ledger_add_pending',
  `INSERT INTO ledger_pending_nodes
    (day, position, node_id, name, credits, credited, reversals, reversed, entries_root, digests_hash, digests, server)
  SELECT $1::date, p, id, name, c, cd, r, rd, decode(er, 'hex'), decode(dh, 'hex'), decode(dg, 'hex'), $2::text
  FROM unnest($3::integer[], $4::bigint[], $5::text[], $6::bigint[], $7::numeric[], $8::bigint[], $9::numeric[], $10::text[], $11::text[], $12::text[])
    AS t(p, id, name, c, cd, r, rd, er, dh, dg)`,
);
const LOCK = sql('ledger_lock', 'SELECT closed_through::text AS closed_through FROM ledger_state FOR UPDATE');
const PREVIOUS = sql('ledger_previous_root', `SELECT encode(root, 'hex') AS root FROM ledger_days WHERE day = $1::date`);
const INSERT_DAY = sql(
  'ledger_insert_day',
  `INSERT INTO ledger_days
    (day, root, previous_root, nodes, entries, credits, credited, reversals, reversed, key_id, signature)
  VALUES ($1::date, decode($2::text, 'hex'), decode($3::text, 'hex'), $4::integer, $5::bigint, $6::bigint, $7::numeric, $8::bigint, $9::numeric, $10::text, decode($11::text, 'base64'))`,
);
const MOVE_PENDING = sql(
  'ledger_move_pending',
  `WITH moved AS (DELETE FROM ledger_pending_nodes WHERE day = $1::date AND server = $2::text RETURNING *)
  INSERT INTO ledger_day_nodes (day, position, node_id, name, credits, credited, reversals, reversed, entries_root, digests_hash, digests)
  SELECT day, position, node_id, name, credits, credited, reversals, reversed, entries_root, digests_hash, digests FROM moved`,
);
const DROP_PENDING = sql('ledger_drop_pending', 'DELETE FROM ledger_pending_nodes WHERE day = $1::date');
const MARK_CLOSED = sql('ledger_mark_closed', 'UPDATE ledger_state SET closed_through = $1::date');
// The day's points as daily_points serves them, against the ledger's net totals.
const DISAGREEMENTS = sql(
  'ledger_disagreements',
  `SELECT coalesce(l.name, n.name) AS node, coalesce(l.net, 0)::text AS ledger, coalesce(d.points, 0)::text AS "dailyPoints"
  FROM (SELECT node_id, name, trim_scale(credited - reversed) AS net FROM ledger_day_nodes WHERE day = $1::date) l
  FULL JOIN (SELECT node_id, trim_scale(points) AS points FROM node_daily_points WHERE day = $1::date) d ON d.node_id = l.node_id
  LEFT JOIN nodes n ON n.id = d.node_id
  WHERE coalesce(l.net, 0) <> coalesce(d.points, 0)`,
);

interface Computed {
  day: string;
  totals: DayTotals;
  credits: number;
  reversals: number;
}

/** Phase 1: the day's node leaves (written as pending) and its totals. */
async function compute(db: Database, day: string, o: CloseOptions, renew: () => Promise<void>): Promise<Computed> {
  const source = new DayEntries(db, day, o.pageSize ?? PAGE);
  await db.query(CLEAR_PENDING, [day, o.server]);
  const nodes = await source.nodes();
  await o.pace?.();
  const dayTree = new DayAccumulator(sha256);
  let position = 0;
  // Node rows go to the database in batches of about a megabyte of digests.
  let pending: { id: number; n: NodeSummary; digests: string }[] = [];
  let pendingBytes = 0;
  const flush = async () => {
    if (pending.length === 0) return;
    const col = <T>(f: (p: (typeof pending)[number]) => T): T[] => pending.map(f);
    await db.query(ADD_PENDING, [
      day,
      o.server,
      col(() => position++),
      col((p) => p.id),
      col((p) => p.n.name),
      col((p) => p.n.credits),
      col((p) => p.n.credited),
      col((p) => p.n.reversals),
      col((p) => p.n.reversed),
      col((p) => p.n.entries_root),
      col((p) => p.n.digests_hash),
      col((p) => p.digests),
    ]);
    pending = [];
    pendingBytes = 0;
    await o.pace?.();
  };
  let acc: NodeAccumulator | undefined;
  for await (const chunk of source.chunks(nodes)) {
    acc ??= new NodeAccumulator(sha256, chunk.node.name);
    for (const e of chunk.entries) acc.add(e);
    if (chunk.done) {
      const n = acc.finish();
      acc = undefined;
      dayTree.add(n);
      const digests = toHex(n.digests);
      pending.push({ id: chunk.node.nodeId, n, digests });
      pendingBytes += digests.length;
      if (pendingBytes > 2_000_000 || pending.length >= 1_000) await flush();
    }
    if (o.stopping?.()) throw new ClosingStopped('the server is stopping');
    await renew();
    await o.pace?.();
  }
  await flush();
  const totals = dayTree.finish();
  return { day, totals, credits: totals.credits, reversals: totals.reversals };
}

type Committed = 'closed' | 'taken' | 'changed';

/** Phase 2: under ledger_state's row lock, re-count, sign and record. */
async function commit(db: Database, c: Computed, o: CloseOptions): Promise<Committed> {
  return db.transaction(async (tx) => {
    const [state] = await tx.query<{ closed_through: string | null }>(LOCK);
    const closedThrough = state!.closed_through;
    if (closedThrough !== null && closedThrough >= c.day) return 'taken';
    const now = await new DayEntries(tx, c.day).count();
    if (now.credits !== c.credits || now.reversals !== c.reversals) return 'changed';
    const previous = closedThrough === null ? ZERO_ROOT : (await tx.query<{ root: string }>(PREVIOUS, [closedThrough]))[0]?.root;
    if (previous === undefined) throw new Error(`ledger_days has no row for ${closedThrough}, the last closed day`);
    const header: DayHeader = { day: c.day, previous_root: previous, ...c.totals };
    const signature = o.key.sign!(signedBytes(header)).toString('base64');
    await tx.query(INSERT_DAY, [
      c.day,
      header.root,
      header.previous_root,
      header.nodes,
      header.entries,
      header.credits,
      header.credited,
      header.reversals,
      header.reversed,
      o.key.keyId,
      signature,
    ]);
    await tx.query(MOVE_PENDING, [c.day, o.server]);
    await tx.query(DROP_PENDING, [c.day]);
    await tx.query(MARK_CLOSED, [c.day]);
    await o.beforeCommit?.(c.day);
    return 'closed';
  });
}

/** Closes every day that is due, in order; answers what it did. Does nothing while another server holds the claim. */
export async function closeDueDays(db: Database, o: CloseOptions): Promise<CloseReport> {
  const report: CloseReport = { closed: [], recomputed: 0, disagreements: [] };
  if (!o.key.sign) throw new Error(`this server cannot sign: the ledger's key ${o.key.keyId} lives in another server's LEDGER_KEY_FILE`);
  let claimedAt = 0;
  const renew = async (force = false): Promise<boolean> => {
    if (!force && Date.now() - claimedAt < (CLAIM_SECONDS * 1000) / 4) return true;
    const got = (await db.query<{ claimed: boolean }>(CLAIM, [o.server, CLAIM_SECONDS])).length > 0;
    if (got) claimedAt = Date.now();
    return got;
  };
  try {
    for (;;) {
      const [next] = await db.query<{ day: string | null; due: boolean }>(NEXT, [o.window]);
      if (!next?.day || !next.due) break;
      if (!(await renew(true))) break;
      let outcome: Committed = 'changed';
      for (let attempt = 1; attempt <= MAX_ATTEMPTS && outcome === 'changed'; attempt++) {
        if (attempt > 1) report.recomputed++;
        const computed = await compute(db, next.day, o, async () => {
          await renew();
        });
        await o.afterCompute?.(next.day);
        outcome = await commit(db, computed, o);
      }
      if (outcome === 'changed') throw new Error(`day ${next.day} kept changing while it was closed (${MAX_ATTEMPTS} attempts)`);
      if (outcome === 'closed') {
        report.closed.push(next.day);
        for (const d of await db.query<{ node: string; ledger: string; dailyPoints: string }>(DISAGREEMENTS, [next.day]))
          report.disagreements.push({ day: next.day, ...d });
      }
      await o.pace?.();
    }
  } finally {
    if (claimedAt) await db.query(RELEASE, [o.server]);
  }
  return report;
}
