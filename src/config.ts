// Configuration from the environment, validated as a whole: every problem is reported, each
// on its own line, and the process exits 1 before doing anything.
import { isIP } from 'node:net';
import path from 'node:path';
import { parsePrice, PRICE_RULE } from './points-value.js';
import { EnvReader, misspeltSettings } from './config-env.js';
import { VERIFY_CONFIG_DOC, readVerifyConfig, type VerifyConfig } from './config-verify.js';

/** Requests per minute; 0 turns a limit off (http/rate-limit.ts applies them). */
export interface RateLimits {
  perIp: number;
  reportsPerKey: number;
  readsPerKey: number;
  authFailuresPerIp: number;
  /** Chat completions per minute per user key (the OpenAI-compatible API). */
  completionsPerUser: number;
  /** Chat completions running at once per user key, on one server. */
  concurrentPerUser: number;
  /** job_progress calls per minute per job key (a worker streams at most ten pieces a second, and a heartbeat). */
  progressPerKey: number;
  /** Long polls (get_result and get_job with `wait`) waiting at once, per key and per client address, on one server; past either, a poll answers at once. */
  longPollsPerKey: number;
  longPollsPerIp: number;
}

/** Generous enough that a worker reporting every few seconds is never throttled. */
export const DEFAULT_RATE_LIMITS: RateLimits = {
  perIp: 6000,
  reportsPerKey: 600,
  readsPerKey: 300,
  authFailuresPerIp: 30,
  completionsPerUser: 600,
  concurrentPerUser: 32,
  progressPerKey: 1200,
  longPollsPerKey: 64,
  longPollsPerIp: 1000,
};
export const NO_RATE_LIMITS: RateLimits = {
  perIp: 0,
  reportsPerKey: 0,
  readsPerKey: 0,
  authFailuresPerIp: 0,
  completionsPerUser: 0,
  concurrentPerUser: 0,
  progressPerKey: 0,
  longPollsPerKey: 0,
  longPollsPerIp: 0,
};

/** How DATABASE_URL reaches PostgreSQL (db/pg.ts): auto finds a transaction pooler by itself. */
export type DatabasePooler = 'auto' | 'transaction' | 'none';

/**
 * Whom to believe about the client's address (X-Forwarded-For): nobody (false), or the proxies
 * at these addresses, networks (CIDR) or proxy-addr's names (loopback, linklocal, uniquelocal).
 */
export type TrustProxy = false | string[];

export interface Config {
  /** Variables that look like misspelt settings, each a sentence saying so (config-env.ts misspeltSettings). */
  warnings?: string[];
  port: number;
  host: string;
  databaseUrl: string | undefined;
  /** A direct connection for LISTEN when DATABASE_URL is a transaction pooler. */
  databaseDirectUrl: string | undefined;
  databasePooler: DatabasePooler;
  dataDir: string;
  logLevel: string;
  bodyLimit: number;
  defaultPointsPerJob: number;
  dbPoolMax: number;
  shutdownTimeoutMs: number;
  requestTimeoutMs: number;
  migrateOnStart: boolean;
  headersTimeoutMs: number;
  keepAliveTimeoutMs: number;
  trustProxy: TrustProxy;
  /** CORS_ORIGINS: origins whose pages may call /v1 (docs/openai.md, "Browsers"). */
  corsOrigins: CorsOrigins;
  rateLimits: RateLimits;
  coordinator: CoordinatorConfig;
  verify: VerifyConfig;
  /** Not from the environment: the dispatcher's measurement switches, set only by the benchmark (bench/serve-variant.ts) and tests. */
  dispatch?: { handOff?: boolean; trackEmpty?: boolean; recheck?: boolean };
  /** The ledger's signing key (PEM); unset: kept in the database (docs/ledger.md). */
  ledgerKeyFile: string | undefined;
  /** JOB_RETENTION in seconds: finished jobs' payloads and lease history are deleted after it; 0 keeps everything (src/retention/). */
  jobRetention: number;
  /** Not from the environment: seconds between retention's looks (60), set only by the benchmark (bench/serve-retention.ts). */
  retentionEvery?: number;
}

/** JOB_RETENTION's default: 7 days. */
export const DEFAULT_JOB_RETENTION = 7 * 86400;

/** reports: node keys credit any new job_id (the original contract); dispatched: only leases this service handed out earn points. */
export type CreditPolicy = 'reports' | 'dispatched';

/** The job coordinator's settings (docs/coordinator.md); durations in seconds. */
export interface CoordinatorConfig {
  creditPolicy: CreditPolicy;
  /** Leases a job may have before it fails. */
  maxAttempts: number;
  /** A job's deadline after its submission, unless the user asks for another (up to maxJobTimeout). */
  jobTimeout: number;
  maxJobTimeout: number;
  /** How long a lease lasts (never past the job's deadline); then the job goes back to the queue. */
  leaseTimeout: number;
  /**
   * A lease whose worker sends job_progress (heartbeats, `ins worker`) ends this long after the
   * last one renewed it, within leaseTimeout: a worker that died gives its job back in seconds,
   * not minutes. 0: off (leases last leaseTimeout). Workers that send none (the seed's) are not affected.
   */
  heartbeatTimeout: number;
  /** How long a node's model declaration lasts without being sent again. */
  modelsTtl: number;
  /** How often expired leases and deadlines are swept (by one server at a time). */
  sweepInterval: number;
  /** A node seen this recently is online (active_node_count, ins node list). */
  onlineWindow: number;
  /** How long after its last lease ended a queued job some node failed may wait with no node left that may take it, before it fails. */
  noNodeGrace: number;
  /** Daily quotas of user keys without their own (`ins key set-quota`); null: none. */
  quotaJobs: number | null;
  quotaTokens: number | null;
  /** Output tokens a job that sets no max_output reserves of its owner's daily token quota until its node reports its count. */
  quotaReserveTokens: number;
}

export const DEFAULT_COORDINATOR: CoordinatorConfig = {
  creditPolicy: 'reports',
  maxAttempts: 3,
  jobTimeout: 240,
  maxJobTimeout: 3600,
  leaseTimeout: 180,
  heartbeatTimeout: 15,
  modelsTtl: 6 * 3600,
  sweepInterval: 1,
  onlineWindow: 60,
  noNodeGrace: 10,
  quotaJobs: null,
  quotaTokens: null,
  quotaReserveTokens: 1024,
};

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  }
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** What an operator sets: the variables, their defaults and meaning (the README's configuration table). */
export const CONFIG_DOC: [string, string, string][] = [
  ['PORT', '8000', 'TCP port to listen on'],
  ['HOST', '0.0.0.0', 'address to listen on'],
  ['DATABASE_URL', '(unset)', 'PostgreSQL URL; unset = embedded PGlite in DATA_DIR'],
  ['DATABASE_DIRECT_URL', '(unset)', 'a direct PostgreSQL URL for LISTEN, when DATABASE_URL is a pooler'],
  ['DATABASE_POOLER', 'auto', 'auto, transaction (DATABASE_URL is PgBouncer in transaction mode) or none'],
  ['DATA_DIR', './data', 'directory of the embedded database'],
  ['DB_POOL_MAX', '20', 'PostgreSQL connections per server (LISTEN and, direct, `jobs_lease` take one more each: docs/operations.md)'],
  ['LOG_LEVEL', 'info', 'fatal, error, warn, info, debug, trace or silent'],
  ['TRUST_PROXY', 'false', 'addresses or networks of your reverse proxies, e.g. 10.0.0.0/8 (false: none)'],
  ['BODY_LIMIT', '1MiB', 'largest request body: bytes, or with kb/KiB/mb/MiB'],
  ['RATE_LIMIT_PER_IP', String(DEFAULT_RATE_LIMITS.perIp), 'requests per minute per client address (0 = off)'],
  ['DEFAULT_POINTS_PER_JOB', '1', 'points of a success for models without their own points_per_job'],
  ['CREDIT_POLICY', 'reports', 'reports: node keys credit any new job_id; dispatched: only leased jobs earn points'],
  ['JOB_TIMEOUT', `${DEFAULT_COORDINATOR.jobTimeout}s`, "a job's deadline after submission (s, m, h)"],
  ['DEFAULT_QUOTA_JOBS', '(unset)', 'jobs a user key may submit per UTC day, unless `ins key set-quota` gave it its own (unset: no limit)'],
  ['DEFAULT_QUOTA_TOKENS', '(unset)', 'output tokens a user key may use per UTC day, likewise (unset: no limit)'],
  ['VERIFY', 'on', 'off: no audits and no probes (docs/verification.md)'],
  [
    'LEDGER_KEY_FILE',
    '(unset)',
    "the points ledger's Ed25519 signing key, PEM (created if missing); unset = generated into the database (docs/ledger.md)",
  ],
  [
    'JOB_RETENTION',
    '7d',
    "finished jobs' prompts, answers and lease history are deleted after this (s, m, h, d); points, rosters and the ledger stay; 0 = keep all",
  ],
  ['MIGRATE_ON_START', 'true', '`ins serve` applies pending migrations first'],
];

/** Thresholds and timeouts with measured defaults: docs/operations.md, "Advanced settings". */
export const ADVANCED_CONFIG_DOC: [string, string, string][] = [
  ['REQUEST_TIMEOUT_MS', '30000', 'longest time to receive a whole request'],
  ['HEADERS_TIMEOUT_MS', '10000', 'longest time to receive request headers (slow clients are cut off)'],
  ['KEEP_ALIVE_TIMEOUT_MS', '65000', 'how long an idle keep-alive connection stays open (longer than a proxy keeps its idle upstream connections)'],
  ['CORS_ORIGINS', '*', 'origins whose web pages may call /v1, comma-separated (https://app.example.com), * for any, off for none'],
  ['SHUTDOWN_TIMEOUT_MS', '10000', 'longest wait for in-flight requests on SIGTERM/SIGINT'],
  ['RATE_LIMIT_REPORTS_PER_KEY', String(DEFAULT_RATE_LIMITS.reportsPerKey), 'update_result calls per minute per key, per server (0 = off)'],
  ['RATE_LIMIT_READS_PER_KEY', String(DEFAULT_RATE_LIMITS.readsPerKey), 'daily_points calls per minute per key, per server (0 = off)'],
  [
    'RATE_LIMIT_AUTH_FAILURES_PER_IP',
    String(DEFAULT_RATE_LIMITS.authFailuresPerIp),
    'failed authentications per minute per address, then 429 for its further failures (0 = off)',
  ],
  [
    'RATE_LIMIT_COMPLETIONS_PER_USER',
    String(DEFAULT_RATE_LIMITS.completionsPerUser),
    'chat completions per minute per user key, per server (0 = off)',
  ],
  [
    'RATE_LIMIT_CONCURRENT_PER_USER',
    String(DEFAULT_RATE_LIMITS.concurrentPerUser),
    'chat completions running at once per user key, per server (0 = off)',
  ],
  [
    'RATE_LIMIT_LONG_POLLS_PER_KEY',
    String(DEFAULT_RATE_LIMITS.longPollsPerKey),
    'get_result/get_job polls waiting at once per key, per server; past it a poll answers at once, as with wait=0 (0 = off)',
  ],
  ['RATE_LIMIT_LONG_POLLS_PER_IP', String(DEFAULT_RATE_LIMITS.longPollsPerIp), 'the same per client address (0 = off)'],
  ['MAX_JOB_TIMEOUT', `${DEFAULT_COORDINATOR.maxJobTimeout / 3600}h`, 'the longest deadline a request may ask for'],
  [
    'QUOTA_RESERVE_TOKENS',
    String(DEFAULT_COORDINATOR.quotaReserveTokens),
    'output tokens a job without max_output reserves of the token quota until its node reports its count, and the most it is charged (at least 1)',
  ],
  ['MAX_ATTEMPTS', String(DEFAULT_COORDINATOR.maxAttempts), 'leases a job may have before it fails'],
  ['LEASE_TIMEOUT', `${DEFAULT_COORDINATOR.leaseTimeout}s`, 'how long a node holds a job before it goes back to the queue'],
  [
    'HEARTBEAT_TIMEOUT',
    `${DEFAULT_COORDINATOR.heartbeatTimeout}s`,
    "a worker that sends job_progress heartbeats (ins worker) holds its job at most this long after the last (a heartbeat renews the lease when a third of this has passed since the last renewal; within LEASE_TIMEOUT): a dead worker's job goes back to the queue in seconds (0 = off; at least 6 s)",
  ],
  ['MODELS_TTL', `${DEFAULT_COORDINATOR.modelsTtl / 3600}h`, "how long a node's model declaration lasts (workers re-send it every few hours)"],
  ['SWEEP_INTERVAL', `${DEFAULT_COORDINATOR.sweepInterval}s`, 'how often expired leases and deadlines are swept'],
  ['NODE_ONLINE_WINDOW', `${DEFAULT_COORDINATOR.onlineWindow}s`, 'a node seen this recently counts as online'],
  [
    'NO_NODE_GRACE',
    `${DEFAULT_COORDINATOR.noNodeGrace}s`,
    'a job some node failed fails when no other node that may take it is online this long after its last attempt',
  ],
  ...VERIFY_CONFIG_DOC.filter(([name]) => name !== 'VERIFY'),
];

/** CORS_ORIGINS (docs/openai.md, "Browsers"): '*' any origin; a list: exactly these origins (scheme://host[:port]); false: CORS off. */
export type CorsOrigins = '*' | string[] | false;

export const DEFAULT_CORS_ORIGINS: CorsOrigins = '*';

/** CORS_ORIGINS: '*', 'off', or origins separated by commas; problems go to `problems`. */
function parseCorsOrigins(raw: string | undefined, problems: string[]): CorsOrigins {
  if (raw === undefined || raw === '*') return raw === undefined ? DEFAULT_CORS_ORIGINS : '*';
  if (['off', 'false', 'none', 'no'].includes(raw.toLowerCase())) return false;
  const items = raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const bad = items.filter((item) => {
    try {
      const u = new URL(item);
      return !['http:', 'https:'].includes(u.protocol) || u.origin !== item;
    } catch {
      return true;
    }
  });
  if (bad.length > 0 || items.length === 0) {
    problems.push(
      `CORS_ORIGINS: ${bad.map((b) => JSON.stringify(b)).join(', ') || 'empty'} is not an origin; expected *, off, or origins such as https://app.example.com,http://localhost:3000 (scheme://host[:port], no path)`,
    );
    return DEFAULT_CORS_ORIGINS;
  }
  return items;
}

const TRUST_NAMES = ['loopback', 'linklocal', 'uniquelocal'];

/** An address, a network (address/bits or IPv4 address/netmask) or a proxy-addr name. */
function isTrustable(item: string): boolean {
  if (TRUST_NAMES.includes(item)) return true;
  const [address, bits, ...rest] = item.split('/');
  const family = isIP(address ?? '');
  if (family === 0 || rest.length > 0) return false;
  if (bits === undefined) return true;
  if (/^\d+$/.test(bits)) return Number(bits) <= (family === 4 ? 32 : 128);
  return family === 4 && isIP(bits) === 4;
}

// TRUST_PROXY=true once meant "believe the left-most X-Forwarded-For entry", which the client
// writes: any client could name its own address and step around per-address limits. A hop count
// (Fastify refuses it too) cannot tell a proxy from a client that connects directly.
function readTrustProxy(r: EnvReader): TrustProxy {
  const raw = r.get('TRUST_PROXY');
  const value = raw?.toLowerCase();
  if (value === undefined || ['false', 'no', 'off', '0'].includes(value)) return false;
  const instead =
    'set TRUST_PROXY to the addresses or networks of your proxies, e.g. TRUST_PROXY=127.0.0.1 or TRUST_PROXY=10.0.0.0/8,fd00::/8 (docs/operations.md, "Behind a proxy")';
  if (['true', 'yes', 'on'].includes(value)) {
    r.problems.push(`TRUST_PROXY=${raw}: no longer accepted, because it believed whatever address a client wrote into X-Forwarded-For; ${instead}`);
    return false;
  }
  if (/^\d+$/.test(value)) {
    r.problems.push(`TRUST_PROXY=${raw}: a number of proxies cannot tell a proxy from a client that connects directly; ${instead}`);
    return false;
  }
  const items = value.split(',').map((s) => s.trim());
  const bad = items.filter((item) => !isTrustable(item));
  if (bad.length > 0) {
    r.problems.push(
      `TRUST_PROXY: ${bad.map((b) => JSON.stringify(b)).join(', ')} is not an address, a network (address/bits) or one of ${TRUST_NAMES.join(', ')}; ${instead}`,
    );
    return false;
  }
  return items;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const r = new EnvReader(env);
  const { problems } = r;
  const rateLimits: RateLimits = {
    perIp: r.int('RATE_LIMIT_PER_IP', DEFAULT_RATE_LIMITS.perIp, 0, 10_000_000),
    reportsPerKey: r.int('RATE_LIMIT_REPORTS_PER_KEY', DEFAULT_RATE_LIMITS.reportsPerKey, 0, 10_000_000),
    readsPerKey: r.int('RATE_LIMIT_READS_PER_KEY', DEFAULT_RATE_LIMITS.readsPerKey, 0, 10_000_000),
    authFailuresPerIp: r.int('RATE_LIMIT_AUTH_FAILURES_PER_IP', DEFAULT_RATE_LIMITS.authFailuresPerIp, 0, 10_000_000),
    completionsPerUser: r.int('RATE_LIMIT_COMPLETIONS_PER_USER', DEFAULT_RATE_LIMITS.completionsPerUser, 0, 10_000_000),
    concurrentPerUser: r.int('RATE_LIMIT_CONCURRENT_PER_USER', DEFAULT_RATE_LIMITS.concurrentPerUser, 0, 1_000_000),
    // Not a setting: what an honest worker needs, with room (docs/security.md).
    progressPerKey: DEFAULT_RATE_LIMITS.progressPerKey,
    longPollsPerKey: r.int('RATE_LIMIT_LONG_POLLS_PER_KEY', DEFAULT_RATE_LIMITS.longPollsPerKey, 0, 1_000_000),
    longPollsPerIp: r.int('RATE_LIMIT_LONG_POLLS_PER_IP', DEFAULT_RATE_LIMITS.longPollsPerIp, 0, 1_000_000),
  };

  const logLevel = (r.get('LOG_LEVEL') ?? 'info').toLowerCase();
  if (!LOG_LEVELS.includes(logLevel)) problems.push(`LOG_LEVEL=${JSON.stringify(logLevel)}: expected one of ${LOG_LEVELS.join(', ')}`);

  let defaultPointsPerJob = 1;
  const rawPoints = r.get('DEFAULT_POINTS_PER_JOB');
  if (rawPoints !== undefined) {
    const n = parsePrice(rawPoints);
    if (n === undefined) problems.push(`DEFAULT_POINTS_PER_JOB=${JSON.stringify(rawPoints)}: expected ${PRICE_RULE}`);
    else defaultPointsPerJob = n;
  }

  const databaseUrl = r.get('DATABASE_URL');
  if (databaseUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    problems.push('DATABASE_URL: expected a postgres:// or postgresql:// URL (unset it to use the embedded database)');
  }
  const databaseDirectUrl = r.get('DATABASE_DIRECT_URL');
  if (databaseDirectUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseDirectUrl))
    problems.push('DATABASE_DIRECT_URL: expected a postgres:// or postgresql:// URL');
  if (databaseDirectUrl !== undefined && databaseUrl === undefined)
    problems.push('DATABASE_DIRECT_URL is set without DATABASE_URL: it is the direct way to the same PostgreSQL database');
  const pooler = (r.get('DATABASE_POOLER') ?? 'auto').toLowerCase();
  if (pooler !== 'auto' && pooler !== 'transaction' && pooler !== 'none')
    problems.push(`DATABASE_POOLER=${JSON.stringify(pooler)}: expected auto, transaction or none`);

  const policy = r.get('CREDIT_POLICY') ?? 'reports';
  if (policy !== 'reports' && policy !== 'dispatched') problems.push(`CREDIT_POLICY=${JSON.stringify(policy)}: expected reports or dispatched`);
  const d = DEFAULT_COORDINATOR;
  const coordinator: CoordinatorConfig = {
    creditPolicy: policy === 'dispatched' ? 'dispatched' : 'reports',
    maxAttempts: r.int('MAX_ATTEMPTS', d.maxAttempts, 1, 100),
    jobTimeout: r.duration('JOB_TIMEOUT', d.jobTimeout, 1, 7 * 86400),
    maxJobTimeout: r.duration('MAX_JOB_TIMEOUT', d.maxJobTimeout, 1, 7 * 86400),
    leaseTimeout: r.duration('LEASE_TIMEOUT', d.leaseTimeout, 0.1, 7 * 86400),
    heartbeatTimeout: r.duration('HEARTBEAT_TIMEOUT', d.heartbeatTimeout, 6, 7 * 86400, true),
    modelsTtl: r.duration('MODELS_TTL', d.modelsTtl, 1, 30 * 86400),
    sweepInterval: r.duration('SWEEP_INTERVAL', d.sweepInterval, 0.05, 3600),
    onlineWindow: r.duration('NODE_ONLINE_WINDOW', d.onlineWindow, 1, 86400),
    noNodeGrace: r.duration('NO_NODE_GRACE', d.noNodeGrace, 0, 86400),
    quotaJobs: r.get('DEFAULT_QUOTA_JOBS') === undefined ? null : r.int('DEFAULT_QUOTA_JOBS', 0, 0, 1e15),
    quotaTokens: r.get('DEFAULT_QUOTA_TOKENS') === undefined ? null : r.int('DEFAULT_QUOTA_TOKENS', 0, 0, 1e15),
    // At least 1: it is also the most such a job is charged (jobs/sql/complete.ts), and 0 left
    // the charge without a cap (whatever count the node reported).
    quotaReserveTokens: r.int('QUOTA_RESERVE_TOKENS', d.quotaReserveTokens, 1, 1e9),
  };
  if (coordinator.jobTimeout > coordinator.maxJobTimeout)
    problems.push(`JOB_TIMEOUT (${coordinator.jobTimeout} s) is longer than MAX_JOB_TIMEOUT (${coordinator.maxJobTimeout} s)`);

  const config: Config = {
    port: r.int('PORT', 8000, 0, 65535),
    host: r.get('HOST') ?? '0.0.0.0',
    databaseUrl,
    databaseDirectUrl,
    databasePooler: pooler === 'transaction' || pooler === 'none' ? pooler : 'auto',
    dataDir: path.resolve(r.get('DATA_DIR') ?? './data'),
    logLevel,
    bodyLimit: r.size('BODY_LIMIT', 1024 * 1024, 1024, 1024 ** 3, '1KiB to 1GiB, e.g. 1048576 or 1MiB'),
    defaultPointsPerJob,
    dbPoolMax: r.int('DB_POOL_MAX', 20, 1, 1000),
    shutdownTimeoutMs: r.int('SHUTDOWN_TIMEOUT_MS', 10_000, 0, 600_000),
    requestTimeoutMs: r.int('REQUEST_TIMEOUT_MS', 30_000, 1_000, 600_000),
    migrateOnStart: r.bool('MIGRATE_ON_START', true),
    headersTimeoutMs: r.int('HEADERS_TIMEOUT_MS', 10_000, 100, 600_000),
    keepAliveTimeoutMs: r.int('KEEP_ALIVE_TIMEOUT_MS', 65_000, 1_000, 3_600_000),
    trustProxy: readTrustProxy(r),
    corsOrigins: parseCorsOrigins(r.get('CORS_ORIGINS'), problems),
    rateLimits,
    coordinator,
    verify: readVerifyConfig(r),
    ledgerKeyFile: r.get('LEDGER_KEY_FILE') === undefined ? undefined : path.resolve(r.get('LEDGER_KEY_FILE')!),
    jobRetention: r.duration('JOB_RETENTION', DEFAULT_JOB_RETENTION, 3600, 3650 * 86400, true),
  };
  if (problems.length > 0) throw new ConfigError(problems);
  const settings = new Set([...r.read, ...[...CONFIG_DOC, ...ADVANCED_CONFIG_DOC, ...VERIFY_CONFIG_DOC].map(([name]) => name)]);
  config.warnings = misspeltSettings(env, settings).map(({ name, meant }) => `${name} is not a setting (did you mean ${meant}?): it is ignored`);
  return config;
}
