// API keys that belong to no node: reader keys (rk_, dashboards: read any node's daily points,
// cannot report) and user keys (uk_, applications: submit jobs, read their own results).
import { sql, type Queryable } from '../db/database.js';
import { newKey } from '../keys.js';

export type ApiKeyKind = 'reader' | 'user';
export interface ApiKeyListing {
  id: number;
  kind: ApiKeyKind;
  label: string;
  revoked: boolean;
  created_at: string;
}

const INSERT = sql('api_keys_insert', 'INSERT INTO api_keys (kind, label, key_hash) VALUES ($1::text, $2::text, $3::text) RETURNING id');
const ACTIVE_BY_KEY = sql('api_keys_by_key', 'SELECT id, kind FROM api_keys WHERE key_hash = $1::text AND revoked_at IS NULL');
const LIST = sql(
  'api_keys_list',
  `SELECT id, kind, label, revoked_at IS NOT NULL AS revoked,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created_at
  FROM api_keys ORDER BY id`,
);
const BY_LABEL = sql('api_keys_by_label', 'SELECT id FROM api_keys WHERE label = $1::text AND revoked_at IS NULL');

export async function addApiKey(db: Queryable, kind: ApiKeyKind, label: string): Promise<{ id: number; key: string }> {
  const { key, hash } = newKey(kind);
  const [row] = await db.query<{ id: number }>(INSERT, [kind, label, hash]);
  return { id: Number(row!.id), key };
}

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

const SET_QUOTA = sql(
  'api_keys_set_quota',
  `UPDATE api_keys SET quota_jobs = CASE WHEN $2::boolean THEN $3::bigint ELSE quota_jobs END,
    quota_tokens = CASE WHEN $4::boolean THEN $5::bigint ELSE quota_tokens END
  WHERE id = $1::bigint AND kind = 'user' RETURNING id, quota_jobs::float8 AS jobs, quota_tokens::float8 AS tokens`,
);
const SET_PRIORITY = sql('api_keys_set_priority', `UPDATE api_keys SET priority = $2::real WHERE id = $1::bigint AND kind = 'user' RETURNING id`);

/**
 * Sets a user key's daily quotas (by id or label): a number, null (back to the configured
 * default), or undefined (unchanged). Counted from the next submission on. Answers the key's
 * quotas as they now are.
 */
export async function setKeyQuota(
  db: Queryable,
  idOrLabel: string,
  jobs: number | null | undefined,
  tokens: number | null | undefined,
): Promise<KeyQuota | { error: string }> {
  const r = await resolveKey(db, idOrLabel, 'set it');
  if ('error' in r) return r;
  const [row] =
    r.id === undefined ? [] : await db.query<KeyQuota>(SET_QUOTA, [r.id, jobs !== undefined, jobs ?? null, tokens !== undefined, tokens ?? null]);
  return row ? { id: Number(row.id), jobs: row.jobs, tokens: row.tokens } : { error: `no user key "${idOrLabel}"` };
}

/** A user key's own daily quotas after a change: null where the configured default applies. */
export interface KeyQuota {
  id: number;
  jobs: number | null;
  tokens: number | null;
}

/** Sets a user key's priority (its weight in each model's fair queue; 1 by default). */
export async function setKeyPriority(db: Queryable, idOrLabel: string, priority: number): Promise<{ id: number } | { error: string }> {
  const r = await resolveKey(db, idOrLabel, 'set it');
  if ('error' in r) return r;
  if (r.id === undefined || (await db.query(SET_PRIORITY, [r.id, priority])).length === 0) return { error: `no user key "${idOrLabel}"` };
  return { id: r.id };
}

/** A user key's usage today (UTC) against its quota: the counters the submit statement checks (key_usage, sql/submit.ts). */
export interface KeyUsage {
  day: string;
  used: { jobs: number; tokens: number };
  quota: { jobs: number | null; tokens: number | null };
  priority: number;
  models: { model: string; jobs: number; tokens: number }[];
}

// $1 key id, $2 $3 the default quotas.
const USAGE = sql(
  'key_usage_today',
  `WITH today AS (SELECT (now() AT TIME ZONE 'UTC')::date AS day)
SELECT to_char(t.day, 'YYYY-MM-DD') AS day, k.priority::float8 AS priority,
    coalesce(k.quota_jobs, $2::bigint)::float8 AS quota_jobs, coalesce(k.quota_tokens, $3::bigint)::float8 AS quota_tokens,
    coalesce((SELECT u.jobs FROM key_usage u WHERE u.key_id = k.id AND u.day = t.day AND u.model_id = 0), 0)::float8 AS jobs,
    coalesce((SELECT u.tokens FROM key_usage u WHERE u.key_id = k.id AND u.day = t.day AND u.model_id = 0), 0)::float8 AS tokens,
    coalesce((SELECT json_agg(json_build_object('model', m.name, 'jobs', u.jobs, 'tokens', u.tokens) ORDER BY m.name COLLATE "C")
      FROM key_usage u JOIN models m ON m.id = u.model_id WHERE u.key_id = k.id AND u.day = t.day AND u.model_id <> 0), '[]') AS models
  FROM api_keys k CROSS JOIN today t WHERE k.id = $1::bigint AND k.kind = 'user'`,
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
  }>(USAGE, [keyId, defaults.jobs, defaults.tokens]);
  if (!row) return undefined;
  return {
    day: row.day,
    used: { jobs: row.jobs, tokens: row.tokens },
    quota: { jobs: row.quota_jobs, tokens: row.quota_tokens },
    priority: row.priority,
    models: row.models.map((m) => ({ model: m.model, jobs: Number(m.jobs), tokens: Number(m.tokens) })),
  };
}
