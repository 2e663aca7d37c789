// API keys that belong to no node: reader keys (rk_, dashboards: read any node's daily points,
// cannot report) and user keys (uk_, applications: submit jobs, read their own results). Reads
// only: every write to api_keys is a statement of src/nodes/sql/keys.ts (src/nodes/api-keys.ts).
import { sql, type Queryable } from '../db/database.js';

export type ApiKeyKind = 'reader' | 'user';
export interface ApiKeyListing {
  id: number;
  kind: ApiKeyKind;
  label: string;
  /** A user key's delivery (immediate or checked); a reader key's is immediate (it submits nothing). */
  delivery: string;
  revoked: boolean;
  created_at: string;
}

const ACTIVE_BY_KEY = sql('api_keys_by_key', 'SELECT id, kind FROM api_keys WHERE key_hash = $1::text AND revoked_at IS NULL');
const LIST = sql(
  'api_keys_list',
  `SELECT id, kind, label, delivery, revoked_at IS NOT NULL AS revoked,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created_at
  FROM api_keys ORDER BY id`,
);
const BY_LABEL = sql('api_keys_by_label', 'SELECT id FROM api_keys WHERE label = $1::text AND revoked_at IS NULL');

/** The active key with this hash, or undefined. */
export async function findActiveApiKey(db: Queryable, hash: string): Promise<{ id: number; kind: ApiKeyKind } | undefined> {
  const [row] = await db.query<{ id: number; kind: ApiKeyKind }>(ACTIVE_BY_KEY, [hash]);
  return row ? { id: Number(row.id), kind: row.kind } : undefined;
}

export async function listApiKeys(db: Queryable): Promise<ApiKeyListing[]> {
  return (await db.query<ApiKeyListing>(LIST)).map((r) => ({ ...r, id: Number(r.id) }));
}

/** The key with this id, or the one active key with this label; else why not. */
export async function resolveKey(db: Queryable, idOrLabel: string, verb: string): Promise<{ id: number | undefined } | { error: string }> {
  if (/^\d+$/.test(idOrLabel) && idOrLabel.length < 16) return { id: Number(idOrLabel) };
  const rows = await db.query<{ id: number }>(BY_LABEL, [idOrLabel]);
  if (rows.length > 1) return { error: `${rows.length} active keys are labelled "${idOrLabel}"; ${verb} by id (see: ins key list)` };
  return { id: rows[0] ? Number(rows[0].id) : undefined };
}

/** A user key's usage today (UTC) against its quota: the counters the submit statement checks (key_usage, sql/submit.ts). */
export interface KeyUsage {
  day: string;
  used: { jobs: number; tokens: number };
  quota: { jobs: number | null; tokens: number | null };
  priority: number;
  models: { model: string; jobs: number; tokens: number }[];
  /** The key's delivery (`ins key set-delivery`): immediate, or checked (docs/verification.md, "Checked delivery"). */
  delivery: KeyDelivery;
  /**
   * What checked delivery cost today: the key's jobs delivered checked (or withheld), and the
   * check jobs done about them (score checks, copies, re-runs, and their own checks) with the
   * tokens those reported and the points the network credited for them.
   */
  checking: { jobs: number; checks: number; tokens: number; points: number };
}

export type KeyDelivery = 'immediate' | 'checked';

// $1 key id, $2 $3 the default quotas. Checking: the key's jobs held today (h), and every job
// done about them — a copy or score check of the job (verify_of), or a check of such a copy (a
// re-run's score check) — with their reported tokens and credited points.
const USAGE = sql(
  'key_usage_today',
  `WITH today AS (SELECT (now() AT TIME ZONE 'UTC')::date AS day)
SELECT to_char(t.day, 'YYYY-MM-DD') AS day, k.priority::float8 AS priority,
    coalesce(k.quota_jobs, $2::bigint)::float8 AS quota_jobs, coalesce(k.quota_tokens, $3::bigint)::float8 AS quota_tokens,
    coalesce((SELECT u.jobs FROM key_usage u WHERE u.key_id = k.id AND u.day = t.day AND u.model_id = 0), 0)::float8 AS jobs,
    coalesce((SELECT u.tokens FROM key_usage u WHERE u.key_id = k.id AND u.day = t.day AND u.model_id = 0), 0)::float8 AS tokens,
    coalesce((SELECT json_agg(json_build_object('model', m.name, 'jobs', u.jobs, 'tokens', u.tokens) ORDER BY m.name COLLATE "C")
      FROM key_usage u JOIN models m ON m.id = u.model_id WHERE u.key_id = k.id AND u.day = t.day AND u.model_id <> 0), '[]') AS models,
    k.delivery, c.*
  FROM api_keys k CROSS JOIN today t
  CROSS JOIN LATERAL (
    SELECT count(DISTINCT h.id)::float8 AS checked_jobs, count(x.id)::float8 AS checks,
      coalesce(sum(coalesce(least((x.usage ->> 'prompt_tokens')::numeric, 2147483647), 0) + coalesce(least((x.usage ->> 'completion_tokens')::numeric, 2147483647), 0)), 0)::float8 AS check_tokens,
      coalesce(sum(r.points), 0)::float8 AS check_points
    FROM jobs h
    LEFT JOIN LATERAL (SELECT y.id, y.usage FROM jobs y WHERE y.state = 'done' AND (y.verify_of = h.id OR y.verify_of IN (SELECT z.id FROM jobs z WHERE z.verify_of = h.id))) x ON true
    LEFT JOIN job_results r ON r.job_id = x.id::text AND r.status = 'success'
    WHERE h.owner_key_id = k.id AND h.delivery IS NOT NULL AND h.submitted_at >= t.day::timestamp AT TIME ZONE 'UTC') c
  WHERE k.id = $1::bigint AND k.kind = 'user'`,
);

export async function keyUsage(
  db: Queryable,
  keyId: number,
  defaults: { jobs: number | null; tokens: number | null },
): Promise<KeyUsage | undefined> {
  const [row] = await db.query<{
    day: string;
    priority: number;
    quota_jobs: number | null;
    quota_tokens: number | null;
    jobs: number;
    tokens: number;
    models: { model: string; jobs: number; tokens: number }[];
    delivery: KeyDelivery;
    checked_jobs: number;
    checks: number;
    check_tokens: number;
    check_points: number;
  }>(USAGE, [keyId, defaults.jobs, defaults.tokens]);
  if (!row) return undefined;
  return {
    day: row.day,
    used: { jobs: row.jobs, tokens: row.tokens },
    quota: { jobs: row.quota_jobs, tokens: row.quota_tokens },
    priority: row.priority,
    models: row.models.map((m) => ({ model: m.model, jobs: Number(m.jobs), tokens: Number(m.tokens) })),
    delivery: row.delivery,
    checking: { jobs: row.checked_jobs, checks: row.checks, tokens: row.check_tokens, points: row.check_points },
  };
}
