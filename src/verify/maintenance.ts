// What one server does now and then for verification, under an advisory lock so that one
// server at a time does it: probes, and canaries for models one node serves (verify/probes.ts); points a suspended node was credited
// after its suspension (a report that raced with it) taken back; fingerprints older than the
// evidence window forgotten; done jobs waiting for an audit longer than the window dropped from
// its queue (too old to judge; a server that audits fell that far behind).
import { sql, type Database } from '../db/database.js';
import type { VerifyConfig } from '../config-verify.js';
import type { Outcome } from '../jobs/outcome.js';
import type { CheckQueue } from './copies.js';
import { probe } from './probes.js';
import { reverse } from './reversal.js';
import { pruneAnswers } from './answers.js';

// Any constant shared by all servers: "ins_vr" in ASCII.
const LOCK_KEY = 0x696e735f7672;
const TRY_LOCK = sql('verify_try_lock', `SELECT pg_try_advisory_xact_lock(${LOCK_KEY}) AS got`);
// Nodes suspended within the evidence window ($1, s), with how far back their reversal reaches.
// A credit that raced with a suspension committed within its statement's run (seconds, bounded
// by statement_timeout); the window leaves a round that long after it to find it, even with
// every server down meanwhile. Older suspensions are not looked at again: without the bound,
// every round reversed every node ever suspended, a cost growing with the network's history.
const SUSPENDED = sql(
  'verify_suspended',
  `SELECT node_id::int AS "nodeId", extract(epoch FROM now() - changed_at)::float8 + $1::float8 AS seconds
  FROM node_standing WHERE state = 'suspended' AND changed_at > now() - make_interval(secs => $1::float8)`,
);
const STALE = sql('verify_drop_stale', 'DELETE FROM job_audits WHERE finished_at < now() - make_interval(secs => $1::float8)');

export interface MaintenanceOptions {
  verify: VerifyConfig;
  onlineWindow: number;
  modelsTtl: number;
  jobTimeout: number;
  tickSeconds: number;
  checks: CheckQueue;
}

/** One round, if this server gets the lock: answers the models probed (with the outcome to apply), and the points taken back. */
export async function maintain(
  db: Database,
  o: MaintenanceOptions,
): Promise<{ probed: number[]; canaries: number[]; outcome: Outcome | undefined; reversed: number } | undefined> {
  return db.transaction(async (tx) => {
    const [lock] = await tx.query<{ got: boolean }>(TRY_LOCK);
    if (!lock!.got) return undefined;
    const v = o.verify;
    const late = await reverse(tx, { nodes: await tx.query<{ nodeId: number; seconds: number }>(SUSPENDED, [v.evidenceWindow]) }, 'suspended');
    await pruneAnswers(tx, v.evidenceWindow);
    await tx.query(STALE, [v.evidenceWindow]);
    const probed =
      v.probeInterval > 0
        ? await probe(tx, {
            onlineWindow: o.onlineWindow,
            modelsTtl: o.modelsTtl,
            deadline: o.jobTimeout,
            chance: Math.min(1, o.tickSeconds / v.probeInterval),
            checks: o.checks,
          })
        : { models: [], canaries: [], outcome: undefined };
    return { probed: probed.models, canaries: probed.canaries, outcome: probed.outcome, reversed: late.points };
  });
}
