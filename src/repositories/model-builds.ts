// What a session's node runs for each model (issue 31; migrations/0018_model_builds.sql): the
// digest and quantisation its worker declared with update_models (`builds`), kept beside the
// session's models rather than in them, so that the declaration itself (sessions.ts) is untouched.
import { sql, type Queryable } from '../db/database.js';

export interface ModelBuild {
  digest?: string;
  quantization?: string;
}

// $1 the session, $2..$4 its models (ids), digests and quantisations (NULL when not declared):
// the session's rows become exactly these (each with either declared); the rest go. The
// session's own row is locked first, so that two declarations of one session take turns.
const DECLARE = sql(
  'model_builds_declare',
  `WITH s AS (SELECT id FROM node_sessions WHERE id = $1::bigint FOR NO KEY UPDATE),
  b AS (SELECT * FROM unnest($2::int[], $3::text[], $4::text[]) AS b(model_id, digest, quantization) WHERE digest IS NOT NULL OR quantization IS NOT NULL),
  gone AS (DELETE FROM session_model_builds x USING s WHERE x.session_id = s.id AND x.model_id <> ALL(ARRAY(SELECT model_id FROM b)))
  INSERT INTO session_model_builds (session_id, model_id, digest, quantization) SELECT s.id, b.model_id, b.digest, b.quantization FROM s, b
  ON CONFLICT (session_id, model_id) DO UPDATE SET digest = EXCLUDED.digest, quantization = EXCLUDED.quantization
    WHERE (session_model_builds.digest, session_model_builds.quantization) IS DISTINCT FROM (EXCLUDED.digest, EXCLUDED.quantization)`,
);

// Whether the session has any row: a worker that never declared a build (the seed's) costs one
// indexed read per update_models, and no write.
const ANY = sql('model_builds_any', 'SELECT EXISTS (SELECT 1 FROM session_model_builds WHERE session_id = $1::bigint) AS any');

/** Sets what the session runs for each of its models (by model id; a model absent from `builds` declares nothing). */
export async function declareBuilds(db: Queryable, sessionId: number, builds: Map<number, ModelBuild>): Promise<void> {
  if (builds.size === 0) {
    const [row] = await db.query<{ any: boolean }>(ANY, [sessionId]);
    if (!row?.any) return;
  }
  const ids = [...builds.keys()];
  await db.query(DECLARE, [sessionId, ids, ids.map((m) => builds.get(m)!.digest ?? null), ids.map((m) => builds.get(m)!.quantization ?? null)]);
}
