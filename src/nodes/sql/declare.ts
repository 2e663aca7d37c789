// declare: the models a worker session serves (POST /worker/update_models, nodes/declaration.ts
// checks and names them), and with them what it runs for each — the digest and quantisation its
// worker declared (`builds`, session_model_builds: migrations/0018_model_builds.sql) — in one
// statement. The node's state stays. A new set of models, capabilities or contexts is the node
// lifecycle's transition `declared` (src/nodes/states.ts), announced here: sessions are cached
// with their models, capabilities and contexts; builds are cached nowhere and announce nothing.
import { sql, type Queryable } from '../../db/database.js';

/** What a node runs for a model, as its worker declared (either may be absent). */
export interface ModelBuild {
  digest?: string;
  quantization?: string;
}

// $1 the session, $2 its models (ids, sorted), $3 their capabilities (aligned; '{}' when the
// worker declared none), $4 this server's id, $5 their context lengths (aligned; 0: none
// declared, '{}' when the worker declared none: jobs/context.ts), $6 and $7 their digests and
// quantisations (aligned, NULL where not declared; '{}': none). The session's row is locked
// first, so that two declarations of one session take turns; a session ended: no row, nothing
// changes. Its builds become exactly those declared (a model with neither has no row).
export const DECLARE = sql(
  'nodes_declare',
  `WITH old AS (
    SELECT models, model_caps, model_contexts FROM node_sessions WHERE id = $1::bigint AND ended_at IS NULL FOR NO KEY UPDATE),
  declared AS (
    UPDATE node_sessions s SET models = $2::int[], model_caps = $3::int[], model_contexts = $5::int[], models_declared_at = now(), last_seen_at = now()
    FROM old WHERE s.id = $1::bigint RETURNING s.id,
      CASE WHEN old.models IS DISTINCT FROM $2::int[] OR old.model_caps IS DISTINCT FROM $3::int[] OR old.model_contexts IS DISTINCT FROM $5::int[]
        THEN nodes_announce($4::text, 'declared', s.node_id, s.id) END AS announced),
  b AS (SELECT * FROM unnest($2::int[], $6::text[], $7::text[]) AS b(model_id, digest, quantization) WHERE digest IS NOT NULL OR quantization IS NOT NULL),
  gone AS (DELETE FROM session_model_builds x USING declared d WHERE x.session_id = d.id AND x.model_id <> ALL(ARRAY(SELECT model_id FROM b))),
  built AS (
    INSERT INTO session_model_builds (session_id, model_id, digest, quantization) SELECT d.id, b.model_id, b.digest, b.quantization FROM declared d, b
    ON CONFLICT (session_id, model_id) DO UPDATE SET digest = EXCLUDED.digest, quantization = EXCLUDED.quantization
      WHERE (session_model_builds.digest, session_model_builds.quantization) IS DISTINCT FROM (EXCLUDED.digest, EXCLUDED.quantization))
SELECT announced FROM declared`,
);

/** What a session declares, by model id (capabilities undefined: the worker declared none, as the seed's). */
export interface DeclaredSet {
  caps?: Map<number, number>;
  contexts?: Map<number, number>;
  builds?: Map<number, ModelBuild>;
}

/**
 * Sets the session's models, with their capabilities, contexts and builds, as server `server`'s:
 * the announcement's item when the set changed (nodes/lifecycle.ts declare() applies it), null
 * when it did not; undefined: no live session.
 */
export async function declareSet(
  q: Queryable,
  sessionId: number,
  modelIds: number[],
  d: DeclaredSet = {},
  server = '',
): Promise<string | null | undefined> {
  const sorted = [...new Set(modelIds)].sort((a, b) => a - b);
  const aligned = d.caps ? sorted.map((m) => d.caps!.get(m) ?? 0) : [];
  const lengths = d.contexts && d.contexts.size > 0 ? sorted.map((m) => d.contexts!.get(m) ?? 0) : [];
  const builds = d.builds && d.builds.size > 0 ? sorted.map((m) => d.builds!.get(m)) : [];
  const [row] = await q.query<{ announced: string | null }>(DECLARE, [
    sessionId,
    sorted,
    aligned,
    server,
    lengths,
    builds.map((b) => b?.digest ?? null),
    builds.map((b) => b?.quantization ?? null),
  ]);
  return row ? row.announced : undefined;
}
