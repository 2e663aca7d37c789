// Each node's recent answers, as fingerprints (never the text), to find replays: the same
// answer — whitespace and case aside — or a near copy of it (SimHash within a few bits), given
// by the same node to a different prompt. Two SimHashes within 3 bits agree on one of their
// four 16-bit bands at least, so the four band indexes of node_answers find every candidate;
// bit_count settles the distance. An answer several nodes gave (a refusal template) is a
// stock answer, not a replay.
import { sql, type Queryable } from '../db/database.js';
import { nodeSuspended } from '../db/rules/suspended.js';
import { distance } from './text.js';

export interface Fingerprint {
  nodeId: number;
  jobId: string;
  promptHash: bigint;
  answerHash: bigint;
  simhash: bigint;
  /** Near copies count too (long answers only: short texts' SimHashes are close by chance more often). */
  nearToo: boolean;
}
export interface ReplayMatch {
  jobId: string;
  sameAs: string;
  exact: boolean;
  distance: number;
  stock: boolean;
}

// $1..$6 the batch's answers: node ids, job ids, prompt hashes, answer hashes, SimHashes,
// whether near copies count; $7 the window (s); $8 the most bits a near copy is apart. Each is
// remembered, and matched with the newest answer its node gave to another prompt within the
// window, before this batch (the statement sees the table as it was; the batch's own answers
// are compared by matchWithin). Every answer comes back, with its match if it has one, and
// whether it is a stock answer: a node in good standing other than this one gave it too.
const REMEMBER_AND_MATCH = sql(
  'verify_answers_match',
  `WITH a AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::bigint[], $4::bigint[], $5::bigint[], $6::boolean[])
      AS a(node_id, job_id, prompt_hash, answer_hash, simhash, near_too)),
  remembered AS (
    INSERT INTO node_answers (node_id, job_id, prompt_hash, answer_hash, simhash) SELECT node_id, job_id, prompt_hash, answer_hash, simhash FROM a)
  SELECT a.job_id::text AS "jobId", m.job_id::text AS "sameAs", coalesce(m.exact, false) AS exact, m.distance,
    EXISTS (SELECT 1 FROM node_answers o WHERE o.answer_hash = a.answer_hash AND o.node_id <> a.node_id
      AND o.at > now() - make_interval(secs => $7::float8)
      AND NOT ${nodeSuspended('o.node_id')}) AS stock
  FROM a LEFT JOIN LATERAL (
    SELECT p.job_id, p.answer_hash = a.answer_hash AS exact, bit_count((p.simhash # a.simhash)::bit(64))::int AS distance
    FROM node_answers p
    WHERE p.node_id = a.node_id AND p.prompt_hash <> a.prompt_hash AND p.at > now() - make_interval(secs => $7::float8)
      AND ((p.simhash & 65535) = (a.simhash & 65535) OR ((p.simhash >> 16) & 65535) = ((a.simhash >> 16) & 65535)
        OR ((p.simhash >> 32) & 65535) = ((a.simhash >> 32) & 65535) OR ((p.simhash >> 48) & 65535) = ((a.simhash >> 48) & 65535))
      AND (p.answer_hash = a.answer_hash OR (a.near_too AND bit_count((p.simhash # a.simhash)::bit(64)) <= $8::int))
    ORDER BY p.answer_hash = a.answer_hash DESC, p.id DESC LIMIT 1) m ON true`,
);

// Fingerprints older than the window ($1 s) are of no more use: the oldest $2 at most, by id
// (ids grow with time).
const PRUNE = sql(
  'verify_prune_answers',
  `DELETE FROM node_answers WHERE id IN (
  SELECT id FROM node_answers ORDER BY id LIMIT $2::int) AND at < now() - make_interval(secs => $1::float8)`,
);

/** Matches within one batch (in order): an answer copying an earlier one of the same node, and whether another node gave it too. */
export function matchWithin(answers: Fingerprint[], nearBits: number): ReplayMatch[] {
  const out: ReplayMatch[] = [];
  for (const [i, a] of answers.entries()) {
    for (let k = i - 1; k >= 0; k--) {
      const p = answers[k]!;
      if (p.nodeId !== a.nodeId || p.promptHash === a.promptHash) continue;
      const exact = p.answerHash === a.answerHash;
      const bits = distance(p.simhash, a.simhash);
      if (!exact && !(a.nearToo && bits <= nearBits)) continue;
      const stock = exact && answers.some((o) => o.nodeId !== a.nodeId && o.answerHash === a.answerHash);
      out.push({ jobId: a.jobId, sameAs: p.jobId, exact, distance: bits, stock });
      break;
    }
  }
  return out;
}

/** Remembers the answers and answers those that copy an earlier one of the same node: before the batch, or within it. */
export async function rememberAndMatch(db: Queryable, answers: Fingerprint[], windowSeconds: number, nearBits: number): Promise<ReplayMatch[]> {
  if (answers.length === 0) return [];
  const rows = await db.query<Omit<ReplayMatch, 'sameAs'> & { sameAs: string | null }>(REMEMBER_AND_MATCH, [
    answers.map((a) => a.nodeId),
    answers.map((a) => a.jobId),
    answers.map((a) => a.promptHash.toString()),
    answers.map((a) => a.answerHash.toString()),
    answers.map((a) => a.simhash.toString()),
    answers.map((a) => a.nearToo),
    windowSeconds,
    nearBits,
  ]);
  const stockBefore = new Set(rows.filter((r) => r.stock).map((r) => r.jobId));
  const found = new Map(rows.filter((r): r is ReplayMatch => r.sameAs !== null).map((m) => [m.jobId, m]));
  // A match before the batch wins; a stock answer before it is stock within it too.
  for (const m of matchWithin(answers, nearBits)) if (!found.has(m.jobId)) found.set(m.jobId, { ...m, stock: m.stock || stockBefore.has(m.jobId) });
  return [...found.values()];
}

export async function pruneAnswers(db: Queryable, windowSeconds: number): Promise<void> {
  await db.query(PRUNE, [windowSeconds, 10_000]);
}
