// Submitting jobs: concurrent submissions share one statement (db/batcher.ts, the transition
// sql/submit.ts). A job of a model that has a worker waiting on this server, and no older queued
// job, is leased to that worker in the same statement (a hand-off: jobs/dispatcher.ts claim()).
import { randomUUID } from 'node:crypto';
import type { Database } from '../db/database.js';
import { Batcher } from '../db/batcher.js';
import { ensureModelIdFor } from '../repositories/models.js';
import type { Claim } from './dispatcher.js';
import type { Lifecycle } from './lifecycle.js';
import { CONTEXT_ROOM, type Refusal, type SubmitRow } from './sql/submit.js';
import type { LeasedJob } from './sql/lease.js';
import { CAPABILITIES } from './capabilities.js';
import { randomSeed, type JobRequest } from './request.js';
import { ContextTooLong, estimatedTokens } from './context.js';

export interface Submission {
  ownerKeyId: number;
  model: string;
  request: JobRequest;
  timeoutSeconds: number;
  /** The request asked for checked delivery (`x-ins-delivery: checked`); a key set to checked holds every job anyway. */
  checked?: boolean;
}

/** A submitted job: its id, and whether its answer is held until checked (checked delivery, jobs/states.ts). */
export interface SubmittedJob {
  id: string;
  held: boolean;
}

/** A submission over its owner's daily quota (of jobs, or of output tokens): nothing was queued. */
/**
 * New model names (no model of that name existed) a user key may create per UTC day: beyond, its
 * submissions of further new names are refused (TooManyModels) until the next 00:00 UTC.
 * Names that exist (declared by a node, reported, or named before) are never refused.
 */
export const NEW_MODELS_PER_KEY_PER_DAY = 100;

export class TooManyModels extends Error {
  constructor(readonly retryAfterSeconds: number) {
    super(
      `this key named ${NEW_MODELS_PER_KEY_PER_DAY} new models today (UTC), the most a key may: submit to a model that exists, or retry after 00:00 UTC`,
    );
  }
}

export class QuotaExceeded extends Error {
  /** reserve: the output tokens the job reserves, which do not fit in what is left of the quota. */
  constructor(
    readonly which: 'jobs' | 'tokens',
    readonly retryAfterSeconds: number,
    reserve = 0,
  ) {
    super(
      which === 'jobs'
        ? "the key's daily quota of jobs is used up until 00:00 UTC"
        : `the key's daily quota of output tokens has less left than the ${reserve} this job reserves (the most it asks for, or QUOTA_RESERVE_TOKENS when it sets none) until 00:00 UTC; a job asking for fewer may fit (GET /usage shows what is left)`,
    );
  }
}

/** A job that reserves more output tokens than its key's whole daily quota: it never fits, nothing was queued. */
export class ReserveOverQuota extends Error {
  constructor(
    readonly reserve: number,
    readonly maxOutputSet: boolean,
  ) {
    super(
      `this job reserves ${reserve} output tokens (${maxOutputSet ? 'the most it asks for' : 'QUOTA_RESERVE_TOKENS, for a job that sets no maximum'}), more than the key's whole daily quota of output tokens: set max_tokens (max_output on /submit_job) lower; GET /usage shows the quota`,
    );
  }
}

/** How often a submission refused only behind a larger job of its batch is submitted again (each time, one of them is taken or refused for good). */
const RETRIES = 8;

/** Seconds until the next UTC midnight (at least 1): when a day's quota starts again. */
export function secondsToUtcMidnight(now = Date.now()): number {
  return Math.max(1, Math.ceil((86_400_000 - (now % 86_400_000)) / 1000));
}

/** Where submitted jobs may go straight to a waiting worker (the dispatcher). */
export interface HandOff {
  claim(counts: Map<number, number>): Map<number, Claim[]>;
  settleClaim(claim: Claim, job: LeasedJob | null): void;
}

/** `estimate`: the request's estimated tokens (jobs/context.ts), worked out once per submission. */
interface Pending extends SubmitRow {
  model: string;
  estimate: number;
}

/** Told of each committed submission: its id, owner and model, and whether it went straight to a worker. */
export type Submitted = (jobId: string, ownerKeyId: number, modelId: number, handed: boolean) => void;

export class Submitter {
  private readonly batcher: Batcher<Pending, { refused: Refusal | undefined; held: boolean }>;

  /**
   * reserveTokens: what a job that sets no max_output reserves of its owner's daily token quota
   * (QUOTA_RESERVE_TOKENS, at least 1); online: the windows that say which nodes serve a model now
   * (NODE_ONLINE_WINDOW, MODELS_TTL, seconds), for the check of a long job against their contexts.
   */
  constructor(
    private readonly db: Database,
    lifecycle: Lifecycle,
    handOff: HandOff | undefined,
    submitted: Submitted,
    private readonly reserveTokens: number,
    private readonly online: { onlineWindow: number; modelsTtl: number } = { onlineWindow: 60, modelsTtl: 300 },
  ) {
    this.batcher = new Batcher(
      async (rows) => {
        const claims = new Map<Pending, Claim>();
        if (handOff) {
          // Only plain jobs are handed off: a job that needs capabilities (jobs/capabilities.ts) is
          // queued, and the lease statement finds it a session that declared them.
          const plain = rows.filter((r) => !r.request.needs);
          const counts = new Map<number, number>();
          for (const r of plain) counts.set(r.modelId, (counts.get(r.modelId) ?? 0) + 1);
          // At most as many claims per model as jobs of it: each job takes one or none — the first
          // whose session declared no context or one its estimate fits (jobs/context.ts, as the
          // lease round's fitsSql); a claim no job fits waits on.
          const byModel = handOff.claim(counts);
          for (const r of plain) {
            const list = byModel.get(r.modelId);
            const i = list?.findIndex((c) => c.context <= 0 || r.estimate <= c.context) ?? -1;
            if (i >= 0) claims.set(r, list!.splice(i, 1)[0]!);
          }
          for (const list of byModel.values()) for (const c of list) handOff.settleClaim(c, null);
        }
        let handed: Set<string>;
        let held: Set<string>;
        let refused: Map<string, Refusal>;
        try {
          ({ handed, held, refused } = await lifecycle.submit(
            rows.map((r) => {
              const c = claims.get(r);
              return c ? { ...r, handOff: { sessionId: c.sessionId, nodeId: c.nodeId, keyHash: c.keyHash, rank: c.rank } } : r;
            }),
          ));
        } catch (err) {
          for (const claim of claims.values()) handOff!.settleClaim(claim, null);
          throw err;
        }
        for (const r of rows) if (!refused.has(r.id)) submitted(r.id, r.ownerKeyId, r.modelId, handed.has(r.id));
        // A claim the statement could not use (its session at capacity, or ended) waits on.
        for (const [r, claim] of claims) {
          handOff!.settleClaim(
            claim,
            handed.has(r.id)
              ? { group: 0, slot: 0, jobId: r.id, model: r.model, request: r.request, attempt: 1, queuedSeconds: 0, prefix: '' }
              : null,
          );
        }
        return rows.map((r) => ({ refused: refused.get(r.id), held: held.has(r.id) }));
        // alone: a submission the database refuses fails alone; the others of its batch are taken.
      },
      { maxBatch: 128, maxInFlight: 1, alone: true },
    );
  }

  /**
   * Submits the job (queued, or handed to a waiting worker); resolves to its id once committed.
   * Over its owner's daily quota: rejects with QuotaExceeded (ReserveOverQuota when the job alone
   * is more than the whole token quota), and nothing was queued; a new
   * model name beyond the key's NEW_MODELS_PER_KEY_PER_DAY: TooManyModels, nothing created.
   */
  async submit(s: Submission): Promise<SubmittedJob> {
    const id = randomUUID();
    const modelId = await ensureModelIdFor(this.db, s.model, { key: s.ownerKeyId }, NEW_MODELS_PER_KEY_PER_DAY);
    if (modelId === undefined) throw new TooManyModels(secondsToUtcMidnight());
    const request = { ...s.request, seed: s.request.seed ?? randomSeed() };
    // Serialised once: the check against the nodes' contexts and the hand-off's both use it.
    const estimate = estimatedTokens(Buffer.byteLength(JSON.stringify(request)));
    await this.checkContext(modelId, request, estimate);
    // An embeddings job generates no output tokens: it reserves none (and is charged none,
    // sql/complete.ts), so a key with less than the reserve left can still embed.
    const reserve = (s.request.needs ?? 0) & CAPABILITIES.embeddings ? 0 : s.request.max_output > 0 ? s.request.max_output : this.reserveTokens;
    const job = { id, ownerKeyId: s.ownerKeyId, modelId, model: s.model, request, timeout: s.timeoutSeconds, reserve, estimate, checked: s.checked };
    let taken = await this.batcher.load(job);
    for (let n = 0; taken.refused === 'retry' && n < RETRIES; n++) taken = await this.batcher.load(job);
    const { refused } = taken;
    if (refused === 'reserve') throw new ReserveOverQuota(reserve, s.request.max_output > 0);
    if (refused) throw new QuotaExceeded(refused === 'retry' ? 'tokens' : refused, secondsToUtcMidnight(), reserve);
    return { id, held: taken.held };
  }

  /**
   * A job longer, by its estimate, than every node serving its model now declared it can hold
   * is refused (ContextTooLong), nothing queued (jobs/context.ts). Only a job of more than
   * CHECKED_FROM estimated tokens is looked at (one statement more per such submission): a
   * shorter one fits any context a node declares in practice, and if it does not, it waits for a
   * node that can hold it, as a job of a model nobody serves does.
   */
  private async checkContext(modelId: number, request: JobRequest, estimate: number): Promise<void> {
    if (estimate <= CHECKED_FROM) return;
    const [room] = await this.db.query<{ nodes: number; fit: number; longest: number; estimate: number }>(CONTEXT_ROOM, [
      modelId,
      JSON.stringify(request),
      request.needs ?? 0,
      this.online.onlineWindow,
      this.online.modelsTtl,
    ]);
    if (room && room.nodes > 0 && room.fit === 0) throw new ContextTooLong(room.estimate, room.longest);
  }
}

/** Estimated tokens from which a submission is checked against the online nodes' contexts (jobs/context.ts). */
export const CHECKED_FROM = 256;
