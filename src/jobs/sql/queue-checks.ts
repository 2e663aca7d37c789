// Transition: queue checks (none → queued) — the jobs verification makes (src/verify/,
// docs/verification.md): copies of a done job for other nodes (kind `verify`: the original's
// request, seed included, never to a node in exclude_nodes), and probes (kind `probe`: a made-up
// prompt, never to a node whose capabilities do not fit it). Owned by nobody; nobody reads their streams, but a copy keeps its original's `stream`
// (and a share of probes stream, verify/probes.ts), so that a node cannot tell a check from a
// user's job on the worker wire. verify/ asks for them here, inside its own transaction, and
// applies the outcome once that commits.
import { sql, type Queryable } from '../../db/database.js';
import { parseItems, type Outcome } from '../outcome.js';
import type { JobRequest } from '../request.js';

// $1..$7 the jobs: new ids, kinds, the jobs copied (NULL for probes), model ids and requests
// (probes' and score checks'; a copy takes its original's), excluded nodes (array literals), suspicions (the
// evidence a copy was made for; a score check, issue 31, gives its own request: the original's
// with the answer to score, verify/scores.ts); $8 their deadline in seconds; $9 this server's id.
export const QUEUE_CHECKS = sql(
  'jobs_queue_checks',
  `WITH made AS (
  INSERT INTO jobs (id, owner_key_id, model_id, state, request, deadline_at, kind, verify_of, exclude_nodes, suspicion)
  SELECT q.id, NULL, coalesce(o.model_id, q.model_id), 'queued', coalesce(q.request, o.request), now() + make_interval(secs => $8::float8),
    q.kind, q.of, q.exclude::bigint[], q.suspicion
  FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::int[], $5::jsonb[], $6::text[], $7::jsonb[]) AS q(id, kind, of, model_id, request, exclude, suspicion)
  LEFT JOIN jobs o ON o.id = q.of
  WHERE q.of IS NULL OR o.id IS NOT NULL
  RETURNING model_id, verify_of
),
announced AS (
  SELECT jobs_announce($9::text, ARRAY(SELECT model_id FROM made WHERE verify_of IS NULL), ARRAY(SELECT model_id FROM made WHERE verify_of IS NOT NULL),
    '{}', '{}', '{}', '{}', '{}') AS items
)
SELECT items AS announced FROM announced`,
);

export type Check =
  | { kind: 'verify'; id: string; of: string; exclude: number[]; suspicion: Record<string, unknown> | null; request?: JobRequest }
  | {
      kind: 'probe';
      id: string;
      modelId: number;
      request: JobRequest;
      /** Nodes the probe must not go to: their capabilities for the model do not fit it (issue 53, verify/probes.ts). */
      exclude?: number[];
    };

/** Queues the checks; answers the outcome (apply it once the caller's transaction commits). */
export async function queueChecks(db: Queryable, checks: readonly Check[], deadlineSeconds: number, server: string): Promise<Outcome> {
  if (checks.length === 0) return parseItems('');
  const [row] = await db.query<{ announced: string }>(QUEUE_CHECKS, [
    checks.map((c) => c.id),
    checks.map((c) => c.kind),
    checks.map((c) => (c.kind === 'verify' ? c.of : null)),
    checks.map((c) => (c.kind === 'probe' ? c.modelId : null)),
    checks.map((c) => (c.request ? JSON.stringify(c.request) : null)),
    checks.map((c) => `{${(c.exclude ?? []).join(',')}}`),
    checks.map((c) => (c.kind === 'verify' && c.suspicion ? JSON.stringify(c.suspicion) : null)),
    deadlineSeconds,
    server,
  ]);
  return parseItems(row!.announced);
}
