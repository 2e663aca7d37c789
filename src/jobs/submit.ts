// Submitting jobs: concurrent submissions share one statement (db/batcher.ts). A job of a model
// that has a worker waiting on this server, and no older queued job, is leased to that worker
// in the same statement (a hand-off: jobs/dispatcher.ts claim()); the others are queued, and
// every server hears which models got new work (JOBS_CHANNEL), at commit.
import { randomInt, randomUUID } from 'node:crypto';
import { sql, type Database } from '../db/database.js';
import { Batcher } from '../db/batcher.js';
import { ensureModelId } from '../repositories/models.js';
import { JOBS_CHANNEL } from './channels.js';
import type { Claim } from './dispatcher.js';
import type { LeasedJob } from './lease.js';

export interface JobRequest {
  messages: { role: string; content: string }[];
  /** Most tokens to generate; 0: the node's default. */
  max_output: number;
  temperature: number;
  /** Ours: the sampling seed every node that runs the job (or a copy of it) gets. Absent in jobs older than it. */
  seed?: number;
  /** Ours: a client streams the answer, so a worker may send partial output (POST /worker/job_progress). */
  stream?: boolean;
}

/** A seed for a job whose user gave none. */
export const randomSeed = (): number => randomInt(2 ** 31 - 1);

export interface Submission { ownerKeyId: number; model: string; request: JobRequest; timeoutSeconds: number }

interface Row { id: string; ownerKeyId: number; modelId: number; model: string; request: JobRequest; timeout: number }

/** Where submitted jobs may go straight to a waiting worker (the dispatcher). */
export interface HandOff {
  claim(counts: Map<number, number>): Map<number, Claim[]>;
  settleClaim(claim: Claim, job: LeasedJob | null): Promise<void>;
  /** Jobs of these models (so many each) were queued. */
  queued(counts: Map<number, number>): void;
}

// $1..$5 the jobs: ids, owner key ids, model ids, requests, timeouts in seconds; $6..$9 their
// hand-offs (NULL: none): session ids, node ids, job key hashes, ranks among this batch's
// hand-offs of the same session; $10 the lease timeout in seconds; $11 this server's id
// (jobs/channels.ts). A hand-off holds only if the session is live and below its capacity,
// as in jobs/lease.ts; otherwise the job is queued.
const SUBMIT = sql('jobs_submit', `WITH q AS (
  SELECT q.*, coalesce(s.ended_at IS NULL
      AND (SELECT count(*) FROM job_leases l WHERE l.session_id = q.session_id AND l.ended_at IS NULL) + q.rank <= s.capacity
      AND NOT EXISTS (SELECT 1 FROM node_standing r WHERE r.node_id = q.node_id AND r.state = 'suspended'), false) AS direct
  FROM unnest($1::uuid[], $2::bigint[], $3::integer[], $4::jsonb[], $5::float8[], $6::bigint[], $7::bigint[], $8::text[], $9::int[])
    AS q(id, owner_key_id, model_id, request, timeout, session_id, node_id, key_hash, rank)
  LEFT JOIN node_sessions s ON s.id = q.session_id
),
submitted AS (
  INSERT INTO jobs (id, owner_key_id, model_id, state, request, deadline_at, attempts, node_id, first_leased_at, lease_expires_at)
  SELECT id, owner_key_id, model_id, CASE WHEN direct THEN 'leased' ELSE 'queued' END, request, now() + make_interval(secs => timeout),
    CASE WHEN direct THEN 1 ELSE 0 END, CASE WHEN direct THEN node_id END, CASE WHEN direct THEN now() END,
    CASE WHEN direct THEN now() + make_interval(secs => least(timeout, $10::float8)) END
  FROM q
  RETURNING id, model_id, state, lease_expires_at
),
handed AS (
  INSERT INTO job_leases (key_hash, job_id, attempt, node_id, session_id, expires_at)
  SELECT q.key_hash, s.id, 1, q.node_id, q.session_id, s.lease_expires_at FROM submitted s JOIN q ON q.id = s.id WHERE s.state = 'leased'
),
queued AS (SELECT string_agg(model_id || ':' || n, ',') AS items FROM (SELECT model_id, count(*) AS n FROM submitted WHERE state = 'queued' GROUP BY model_id) c)
SELECT s.id::text AS id, s.state = 'leased' AS handed,
  (SELECT count(*) FROM (SELECT pg_notify('${JOBS_CHANNEL}', $11::text || ' ' || items) FROM queued WHERE items IS NOT NULL) n)::int AS told
FROM submitted s`);

export class Submitter {
  private readonly batcher: Batcher<Row, undefined>;

  constructor(private readonly db: Database, server: string, leaseSeconds: number, handOff: HandOff) {
    this.batcher = new Batcher(async (rows) => {
      const counts = new Map<number, number>();
      for (const r of rows) counts.set(r.modelId, (counts.get(r.modelId) ?? 0) + 1);
      // At most as many claims per model as jobs of it: each job takes one or none.
      const claims = handOff.claim(counts);
      const claimOf = new Map<Row, Claim>();
      for (const r of rows) {
        const c = claims.get(r.modelId)?.shift();
        if (c) claimOf.set(r, c);
      }
      const c = (r: Row) => claimOf.get(r);
      let out: { id: string; handed: boolean }[];
      try {
        out = await db.query<{ id: string; handed: boolean }>(SUBMIT, [
          rows.map((r) => r.id), rows.map((r) => r.ownerKeyId), rows.map((r) => r.modelId), rows.map((r) => JSON.stringify(r.request)), rows.map((r) => r.timeout),
          rows.map((r) => c(r)?.sessionId ?? null), rows.map((r) => c(r)?.nodeId ?? null), rows.map((r) => c(r)?.keyHash ?? null), rows.map((r) => c(r)?.rank ?? null),
          leaseSeconds, server,
        ]);
      } catch (err) {
        for (const claim of claimOf.values()) void handOff.settleClaim(claim, null);
        throw err;
      }
      const handed = new Set(out.filter((o) => o.handed).map((o) => o.id));
      const queued = new Map<number, number>();
      for (const r of rows) {
        const claim = c(r);
        // A claim the statement could not use (its session at capacity, or ended) waits on.
        if (claim) void handOff.settleClaim(claim, handed.has(r.id) ? { group: 0, slot: 0, jobId: r.id, model: r.model, request: r.request, attempt: 1, queuedSeconds: 0 } : null);
        if (!handed.has(r.id)) queued.set(r.modelId, (queued.get(r.modelId) ?? 0) + 1);
      }
      handOff.queued(queued);
      return rows.map(() => undefined);
    }, { maxBatch: 128, maxInFlight: 1 });
  }

  /** Submits the job (queued, or handed to a waiting worker); resolves to its id once committed. */
  async submit(s: Submission): Promise<string> {
    const id = randomUUID();
    const modelId = await ensureModelId(this.db, s.model);
    const request = { ...s.request, seed: s.request.seed ?? randomSeed() };
    await this.batcher.load({ id, ownerKeyId: s.ownerKeyId, modelId, model: s.model, request, timeout: s.timeoutSeconds });
    return id;
  }
}
