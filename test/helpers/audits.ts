// Waiting on the verifier in tests that drive audits through the real app: a query helper, "every
// job settled and audited", and a wait for a state (never for a time).
import { sql, type Database } from '../../src/db/database.js';
import { DEFAULT_VERIFY, type VerifyConfig } from '../../src/config-verify.js';
import { maintain, type MaintenanceOptions } from '../../src/verify/maintenance.js';
import type { startApp } from './app.js';
import { until as waitFor } from './wait.js';
import { expect } from 'vitest';
import { totalPoints } from './state.js';
import { aggregatesAndRecomputation } from './aggregates.js';

/** `db` is read at each call: tests start a new app (and database) per test. */
export function auditWaits(db: () => Database, o: { timeoutMs?: number; detail?: () => Promise<string> } = {}) {
  const q = async <T>(name: string, text: string, values: unknown[] = []) => db().query<T>(sql(name, text), values);
  /** No job queued or leased, and none waiting for its audit. */
  const settled = async () =>
    (
      await q<{ n: number }>('t_open', `SELECT count(*)::int AS n FROM jobs WHERE state IN ('queued', 'leased') OR EXISTS (SELECT 1 FROM job_audits)`)
    )[0]!.n === 0;
  const until = (what: string, ok: () => Promise<boolean>, ms = o.timeoutMs ?? 60_000) => waitFor(what, ok, ms, o.detail);
  return { q, settled, until, ...nodeRecords(db) };
}

/**
 * For the token-level audits with real nodes (test/token-audit-*.test.ts), `db` read at each call:
 * a query, "settled" (no job open that a node in good standing could still run, nothing left to
 * audit: a check only a node since suspended could run waits for its deadline and changes
 * nothing), every strike with its node's name, and the points exactly the successes, with every
 * aggregate equal to its recomputation.
 */
export function tokenAudits(db: () => Database) {
  const q = async <T>(name: string, text: string, values: unknown[] = []) => db().query<T>(sql(name, text), values);
  const settled = async () =>
    (
      await q<{ n: number }>(
        't_open',
        `SELECT count(*)::int AS n FROM jobs j WHERE j.state = 'leased' OR (j.state = 'queued'
      AND EXISTS (SELECT 1 FROM nodes n WHERE n.id <> ALL(j.exclude_nodes) AND NOT EXISTS (SELECT 1 FROM node_standing s WHERE s.node_id = n.id AND s.state = 'suspended')))
    OR EXISTS (SELECT 1 FROM job_audits)`,
      )
    )[0]!.n === 0;
  const strikes = async () =>
    q<{ name: string; kind: string; evidence: Record<string, unknown> }>(
      't_strikes',
      'SELECT n.name, k.kind, k.evidence FROM node_strikes k JOIN nodes n ON n.id = k.node_id ORDER BY k.id',
    );
  const pointsExact = async () => {
    // A point per answer, and each score check its priced share (issue 55, docs/verification.md).
    const [done] = await q<{ n: number }>(
      't_done',
      "SELECT (count(*) FILTER (WHERE NOT is_check) + coalesce(sum(points) FILTER (WHERE is_check), 0))::float8 AS n FROM job_results WHERE status = 'success'",
    );
    expect(await totalPoints(db())).toBe(done!.n);
    const { stored, recomputed } = await aggregatesAndRecomputation(db());
    expect(stored).toEqual(recomputed);
  };
  /** The done user jobs, and how many of them kept the tokens their node reported. */
  const doneWithTokens = async () =>
    (
      await q<{ done: number; tokens: number }>(
        't_tokens',
        "SELECT count(*)::int AS done, count(tokens)::int AS tokens FROM jobs WHERE kind = 'user' AND state = 'done'",
      )
    )[0]!;
  /** The token-level evidence of all nodes together: answers judged, positions scored, confident mismatches. */
  const evidenceTotals = async () =>
    (
      await q<{ answers: number; positions: number; mismatches: number }>(
        't_scored',
        `SELECT coalesce(sum(answers), 0)::int AS answers,
      coalesce(sum(positions), 0)::int AS positions, coalesce(sum(mismatches), 0)::int AS mismatches FROM node_token_evidence`,
      )
    )[0]!;
  return { q, settled, strikes, pointsExact, doneWithTokens, evidenceTotals, ...nodeRecords(db) };
}

/** What the verifier left of a node, by name: its standing ('trusted' while it has none) and its points. `db` is read at each call. */
export function nodeRecords(db: () => Database) {
  const q = async <T>(name: string, text: string, values: unknown[] = []) => db().query<T>(sql(name, text), values);
  const standing = async (node: string) =>
    (
      await q<{ state: string }>(
        't_standing',
        `SELECT coalesce((SELECT s.state FROM node_standing s WHERE s.node_id = n.id), 'trusted') AS state
    FROM nodes n WHERE n.name = $1::text`,
        [node],
      )
    )[0]!.state;
  const pointsOf = async (node: string) =>
    (
      await q<{ p: number }>(
        't_points',
        `SELECT coalesce(sum(d.points), 0)::float8 AS p FROM node_daily_points d JOIN nodes n ON n.id = d.node_id
    WHERE n.name = $1::text`,
        [node],
      )
    )[0]!.p;
  /** The node's strikes, oldest first. */
  const strikesOf = async (node: string) =>
    q<{ kind: string; evidence: Record<string, unknown> }>(
      't_strikes_of',
      'SELECT k.kind, k.evidence FROM node_strikes k JOIN nodes n ON n.id = k.node_id WHERE n.name = $1::text ORDER BY k.id',
      [node],
    );
  return { standing, pointsOf, strikesOf };
}

/**
 * Copies this server has counted (ins_verification_total{event="copy"}). The verifier applies a
 * committed batch's outcome — the dispatcher learns a copy is queued — just before it counts the
 * batch, a moment after the copy's row is visible: a poll that looks once leases a copy
 * reliably only once this count has reached it.
 */
export async function copiesCounted(app: { inject(o: { method: 'GET'; url: string }): Promise<{ body: string }> }): Promise<number> {
  return Number(/^ins_verification_total\{event="copy"\} (\d+)$/m.exec((await app.inject({ method: 'GET', url: '/metrics' })).body)?.[1] ?? 0);
}

/**
 * A maintenance round of the test's own (verify/maintenance.ts). The app's verifier runs its own
 * rounds under the same advisory lock, and a round that finds the lock held does nothing: that
 * one is run again once the app's round is over, so the test never reads "nothing sent" from a
 * collision (seen on a loaded machine).
 */
export async function ownRound(db: Database, o: MaintenanceOptions, ms = 60_000) {
  let round: Awaited<ReturnType<typeof maintain>>;
  await waitFor('the maintenance lock', async () => (round = await maintain(db, o)) !== undefined, ms);
  return round!;
}

/**
 * A round of the test's own (ownRound) on the app of `t` (test/helpers/app.ts), with `verify`
 * over the defaults, its outcome applied to the app's lifecycle as the app's own rounds do.
 */
export async function ownRoundApplied(t: Pick<Awaited<ReturnType<typeof startApp>>, 'app' | 'db'>, verify: Partial<VerifyConfig>) {
  const lifecycle = t.app.service.coordinator.lifecycle;
  const r = await ownRound(t.db, {
    verify: { ...DEFAULT_VERIFY, ...verify },
    onlineWindow: 60,
    modelsTtl: 3600,
    jobTimeout: 60,
    tickSeconds: 1,
    checks: lifecycle,
  });
  if (r.outcome) lifecycle.apply(r.outcome);
  return r;
}
