// Waiting on the verifier in tests that drive audits through the real app: a query helper, "every
// job settled and audited", and a wait for a state (never for a time).
import { sql, type Database } from '../../src/db/database.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `db` is read at each call: tests start a new app (and database) per test. */
export function auditWaits(db: () => Database, o: { timeoutMs?: number; detail?: () => Promise<string> } = {}) {
  const q = async <T>(name: string, text: string, values: unknown[] = []) => db().query<T>(sql(name, text), values);
  /** No job queued or leased, and none waiting for its audit. */
  const settled = async () => (await q<{ n: number }>('t_open', `SELECT count(*)::int AS n FROM jobs WHERE state IN ('queued', 'leased') OR EXISTS (SELECT 1 FROM job_audits)`))[0]!.n === 0;
  const until = async (what: string, ok: () => Promise<boolean>, ms = o.timeoutMs ?? 60_000) => {
    for (const end = Date.now() + ms; Date.now() < end; await sleep(20)) if (await ok()) return;
    throw new Error(`timed out waiting for ${what}${o.detail ? `: ${await o.detail()}` : ''}`);
  };
  return { q, settled, until };
}
