// Transition: lease (queued → leased). One statement per dispatch round (jobs/dispatcher.ts)
// for every waiting poll that may find a job.
//
// Lock order, to keep concurrent statements out of deadlocks: a lease row (job_leases) before
// its job row (jobs) wherever both change — completion, release, cancel and the sweep. This
// statement only locks queued jobs, which no open lease points to.
import { sql, type Queryable } from '../../db/database.js';
import { nodeSuspended } from '../../db/rules/suspended.js';
import { sessionHolds } from '../../db/rules/live.js';
import type { JobRequest } from '../request.js';
import { fitsSql } from '../context.js';

/** One waiting poll: the session asking, its model set's group and its slot in the group. */
export interface Ask {
  group: number;
  slot: number;
  sessionId: number;
  nodeId: number;
  keyHash: string;
  rank: number;
}
/**
 * Asks with the same model set (and the same capabilities for each, `caps` aligned with
 * `models`: jobs/capabilities.ts bits, absent: none) form a group; it leases at most `count`
 * jobs, first in fair order.
 */
export interface Group {
  group: number;
  models: number[];
  count: number;
  caps?: number[];
  /** The context length the group's sessions declared for each of `models` (aligned; 0 or absent: none; jobs/context.ts). */
  contexts?: number[];
}

export interface LeasedJob {
  group: number;
  slot: number;
  jobId: string;
  model: string;
  request: JobRequest;
  attempt: number;
  queuedSeconds: number;
  /** The answer's beginning an earlier attempt streamed to the client (jobs.streamed): the node continues it. */
  prefix: string;
}
export type LeaseRow = LeasedJob | { group: number; slot: number; overCapacity: true };

// The two pairing passes of a round (see LEASE below), for the copies and for the jobs: `<name>_first`
// gives the k-th of `jobs` to the ask in `slot` k; `<name>_second` pairs what it left, each
// left-over ask with the first left-over job it may have, then each job with its first such
// ask. An ask may have a job when its session has room and its node is not in the job's
// exclude_nodes. Both yield (job_id, jk, g, k, session_id, node_id, key_hash).
const pairing = (name: string, jobs: string, asks: string, slot: string): string => `${name}_first AS (
  SELECT x.id AS job_id, x.k AS jk, a.g, a.k, a.session_id, a.node_id, a.key_hash
  FROM ${jobs} x JOIN ${asks} a ON a.g = x.g AND a.${slot} = x.k AND a.open + a.rank <= a.capacity AND NOT (a.node_id = ANY(x.exclude_nodes))
),
${name}_second AS (
  SELECT DISTINCT ON (y.job_id) y.* FROM (
    SELECT DISTINCT ON (a.g, a.k) x.id AS job_id, x.k AS jk, a.g, a.k, a.session_id, a.node_id, a.key_hash
    FROM ${jobs} x JOIN ${asks} a ON a.g = x.g AND a.open + a.rank <= a.capacity AND NOT (a.node_id = ANY(x.exclude_nodes))
    WHERE NOT EXISTS (SELECT 1 FROM ${name}_first f WHERE f.g = x.g AND f.jk = x.k)
      AND NOT EXISTS (SELECT 1 FROM ${name}_first f WHERE f.g = a.g AND f.k = a.k)
    ORDER BY a.g, a.k, x.k) y
  ORDER BY y.job_id, y.k
),`;

// $1..$6 the asks: group, slot, session id, node id, job key hash, rank among this batch's
// asks of the same session (1-based); $7..$9 the groups: group, model ids (array literal),
// count; $10 the lease timeout in seconds. An ask whose session would exceed its capacity is
// answered `over_capacity` and gets nothing; a suspended node's ask gets nothing either, nor one
// whose session no longer holds (ended, its node disabled or given a new key: db/rules/live.ts). Two
// groups with overlapping models may pick the same job (a statement does not skip its own
// locks): it goes to the first group, and the other ask stays waiting for the next round.
// Copies of jobs being verified (verify_of, src/verify/) go first: each group takes its oldest
// copies as it takes jobs. Jobs are taken in their model's fair order, (fair_key, id)
// (sql/submit.ts: owners in turn, weighted by priority, oldest first within an owner), through
// the partial index jobs_queued (model_id, fair_key, id). A job (or copy) that every ask of the
// group is excluded from (exclude_nodes: its node held a lease of the job being checked, failed
// this job, or gave it up twice) is skipped, not taken: it would only block the jobs behind it. The k-th job (or
// copy) goes to the group's k-th free ask (`*_first`); a job (or copy) whose k-th ask's node may
// not have it goes, in a second pass (`*_second`), to the first ask left over that may: each
// left-over ask takes the first left-over job it may have, then each job keeps its first such
// ask. That pass finds a pair whenever one exists, so a job excluded for one ask's node never
// starves while a node that may have it polls beside it (a fixed pairing let two copies, each
// excluded for the other's ask, wait for their deadline round after round).
// Planned once per connection (`plan: 'generic'`, db/pg.ts): its custom plan cost as much
// planning as execution at every round.
// Capabilities (issue 28): a job (or copy) whose needs (jobs.needs) the group's capabilities for
// its model do not cover is skipped like an excluded one — never taken, never blocking the jobs
// behind it; $11 the groups' capabilities (array literals aligned with their models).
// Context (issue 53): a job whose estimated length exceeds the context the group declared for its
// model ($12, aligned likewise; 0: none declared) is skipped the same way (jobs/context.ts fitsSql).
export const LEASE = sql(
  'jobs_lease',
  `WITH asks AS (
  SELECT a.*, s.capacity,
    (SELECT count(*) FROM job_leases l WHERE l.session_id = a.session_id AND l.ended_at IS NULL) AS open
  FROM unnest($1::int[], $2::int[], $3::bigint[], $4::bigint[], $5::text[], $6::int[]) AS a(g, k, session_id, node_id, key_hash, rank)
  JOIN node_sessions s ON s.id = a.session_id JOIN nodes n ON n.id = s.node_id
  WHERE ${sessionHolds('s', 'n')} AND NOT ${nodeSuspended('a.node_id')}
),
groups AS (
  SELECT g.g, g.models::int[] AS models, g.n, g.caps::int[] AS caps, g.ctxs::int[] AS ctxs, coalesce((SELECT array_agg(a.node_id) FROM asks a WHERE a.g = g.g), '{}') AS nodes
  FROM unnest($7::int[], $8::text[], $9::int[], $11::text[], $12::text[]) AS g(g, models, n, caps, ctxs)
),
copies AS (
  SELECT g.g, c.id, c.exclude_nodes, row_number() OVER (PARTITION BY g.g ORDER BY c.submitted_at, c.id)::int AS k
  FROM groups g
  CROSS JOIN LATERAL (
    SELECT j.id, j.submitted_at, j.exclude_nodes FROM jobs j
    WHERE j.state = 'queued' AND j.verify_of IS NOT NULL AND j.model_id = ANY(g.models) AND j.deadline_at > now()
      AND NOT (j.exclude_nodes @> g.nodes)
      AND j.needs & ~coalesce(g.caps[array_position(g.models, j.model_id)], 0) = 0 AND ${fitsSql('g.ctxs[array_position(g.models, j.model_id)]', 'j')}
    ORDER BY j.submitted_at, j.id LIMIT g.n
    FOR UPDATE SKIP LOCKED) c
),
${pairing('copies', 'copies', 'asks', 'k')}
copies_assigned AS (
  SELECT DISTINCT ON (u.job_id) u.job_id, u.g, u.k, u.session_id, u.node_id, u.key_hash
  FROM (SELECT * FROM copies_first UNION ALL SELECT * FROM copies_second) u
  ORDER BY u.job_id, u.g
),
free_asks AS (
  SELECT a.*, row_number() OVER (PARTITION BY a.g ORDER BY a.k)::int AS fk FROM asks a
  WHERE NOT EXISTS (SELECT 1 FROM copies_assigned c WHERE c.g = a.g AND c.k = a.k)
),
picked AS (
  SELECT g.g, p.id, p.exclude_nodes, row_number() OVER (PARTITION BY g.g ORDER BY p.fair_key, p.id)::int AS k
  FROM groups g
  CROSS JOIN LATERAL (
    SELECT c.id, c.fair_key, c.exclude_nodes FROM unnest(g.models, g.caps, g.ctxs) AS gm(model_id, caps, ctx)
    CROSS JOIN LATERAL (
      SELECT j.id, j.fair_key, j.exclude_nodes FROM jobs j
      WHERE j.state = 'queued' AND j.verify_of IS NULL AND j.model_id = gm.model_id AND j.deadline_at > now()
        AND NOT (j.exclude_nodes @> g.nodes) AND j.needs & ~coalesce(gm.caps, 0) = 0 AND ${fitsSql('gm.ctx', 'j')}
      ORDER BY j.fair_key, j.id LIMIT g.n
      FOR UPDATE SKIP LOCKED) c
    ORDER BY c.fair_key, c.id LIMIT g.n) p
),
${pairing('picked', 'picked', 'free_asks', 'fk')}
assigned AS (
  SELECT * FROM copies_assigned
  UNION ALL
  (SELECT DISTINCT ON (u.job_id) u.job_id, u.g, u.k, u.session_id, u.node_id, u.key_hash
  FROM (SELECT * FROM picked_first UNION ALL SELECT * FROM picked_second) u
  ORDER BY u.job_id, u.g)
),
leased AS (
  UPDATE jobs j SET state = 'leased', attempts = j.attempts + 1, node_id = a.node_id, first_leased_at = coalesce(j.first_leased_at, now()),
    lease_expires_at = least(j.deadline_at, now() + make_interval(secs => $10::float8))
  FROM assigned a WHERE j.id = a.job_id
  RETURNING j.id, j.model_id, j.request, j.attempts, j.lease_expires_at, j.submitted_at, j.streamed
),
recorded AS (
  INSERT INTO job_leases (key_hash, job_id, attempt, node_id, session_id, expires_at, prefix)
  SELECT a.key_hash, l.id, l.attempts, a.node_id, a.session_id, l.lease_expires_at, l.streamed
  FROM assigned a JOIN leased l ON l.id = a.job_id
),
-- Groups whose models still have queued jobs, or copies, this round did not hand out: copies
-- meant for other nodes, jobs another server holds locked, jobs a suspended node's ask could not
-- take. Their models are not empty, though the round found fewer jobs than it asked for. (One
-- EXISTS per partial index of queued jobs: jobs_queued and jobs_verify_queued.)
left_over AS (
  SELECT g.g,
    EXISTS (SELECT 1 FROM jobs j WHERE j.state = 'queued' AND j.verify_of IS NULL AND j.model_id = ANY(g.models::int[])
      AND j.deadline_at > now() AND j.id NOT IN (SELECT job_id FROM assigned)) AS jobs,
    EXISTS (SELECT 1 FROM jobs j WHERE j.state = 'queued' AND j.verify_of IS NOT NULL AND j.model_id = ANY(g.models::int[])
      AND j.deadline_at > now() AND j.id NOT IN (SELECT job_id FROM assigned)) AS copies
  FROM unnest($7::int[], $8::text[]) AS g(g, models)
)
SELECT a.g, a.k, 'leased' AS row, l.id::text AS job_id, m.name AS model, l.request, l.attempts AS attempt,
    extract(epoch FROM now() - l.submitted_at)::float8 AS queued_seconds, l.streamed AS prefix
  FROM assigned a JOIN leased l ON l.id = a.job_id JOIN models m ON m.id = l.model_id
UNION ALL
SELECT a.g, a.k, 'over_capacity', NULL, NULL, NULL, NULL, NULL, NULL FROM asks a WHERE a.open + a.rank > a.capacity
UNION ALL
SELECT c.g, 0, 'jobs_left', NULL, NULL, NULL, NULL, NULL, NULL FROM left_over c WHERE c.jobs
UNION ALL
SELECT c.g, 0, 'copies_left', NULL, NULL, NULL, NULL, NULL, NULL FROM left_over c WHERE c.copies`,
  { plan: 'generic' },
);
// (A suspended node's asks are in neither part: they get nothing, and wait.)

interface Row {
  g: number;
  k: number;
  row: 'leased' | 'over_capacity' | 'jobs_left' | 'copies_left';
  job_id: string | null;
  model: string | null;
  request: JobRequest | null;
  attempt: number | null;
  queued_seconds: number | null;
  prefix: string | null;
}

/** A round's leases, and the groups whose models still have queued jobs, or copies, it did not hand out. */
export interface LeaseRound {
  rows: LeaseRow[];
  jobsLeft: Set<number>;
  copiesLeft: Set<number>;
}

export async function leaseJobs(db: Queryable, asks: readonly Ask[], groups: readonly Group[], leaseSeconds: number): Promise<LeaseRound> {
  const rows = await db.query<Row>(LEASE, [
    asks.map((a) => a.group),
    asks.map((a) => a.slot),
    asks.map((a) => a.sessionId),
    asks.map((a) => a.nodeId),
    asks.map((a) => a.keyHash),
    asks.map((a) => a.rank),
    groups.map((g) => g.group),
    groups.map((g) => `{${g.models.join(',')}}`),
    groups.map((g) => g.count),
    leaseSeconds,
    groups.map((g) => `{${(g.caps ?? []).join(',')}}`),
    groups.map((g) => `{${(g.contexts ?? []).join(',')}}`),
  ]);
  return {
    rows: rows
      .filter((r) => r.row === 'leased' || r.row === 'over_capacity')
      .map(
        (r): LeaseRow =>
          r.row === 'over_capacity'
            ? { group: r.g, slot: r.k, overCapacity: true }
            : {
                group: r.g,
                slot: r.k,
                jobId: r.job_id!,
                model: r.model!,
                request: r.request!,
                attempt: r.attempt!,
                queuedSeconds: r.queued_seconds!,
                prefix: r.prefix ?? '',
              },
      ),
    jobsLeft: new Set(rows.filter((r) => r.row === 'jobs_left').map((r) => r.g)),
    copiesLeft: new Set(rows.filter((r) => r.row === 'copies_left').map((r) => r.g)),
  };
}
