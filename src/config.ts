// Configuration from the environment, validated as a whole: every problem is reported, each
// on its own line, and the process exits 1 before doing anything.
import path from 'node:path';
import { parsePoints } from './points-value.js';

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
}

/** Generous enough that a worker reporting every few seconds is never throttled. */
export const DEFAULT_RATE_LIMITS: RateLimits = { perIp: 6000, reportsPerKey: 600, readsPerKey: 300, authFailuresPerIp: 30, completionsPerUser: 600, concurrentPerUser: 32 };
export const NO_RATE_LIMITS: RateLimits = { perIp: 0, reportsPerKey: 0, readsPerKey: 0, authFailuresPerIp: 0, completionsPerUser: 0, concurrentPerUser: 0 };

export interface Config {
  port: number;
  host: string;
  databaseUrl: string | undefined;
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
  trustProxy: boolean;
  rateLimits: RateLimits;
  coordinator: CoordinatorConfig;
}

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
  /** How long a node's model declaration lasts without being sent again. */
  modelsTtl: number;
  /** How often expired leases and deadlines are swept (by one server at a time). */
  sweepInterval: number;
  /** A node seen this recently is online (active_node_count, ins node list). */
  onlineWindow: number;
}

export const DEFAULT_COORDINATOR: CoordinatorConfig = {
  creditPolicy: 'reports', maxAttempts: 3, jobTimeout: 240, maxJobTimeout: 3600, leaseTimeout: 180, modelsTtl: 6 * 3600, sweepInterval: 1, onlineWindow: 60,
};

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  }
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
const SIZE = /^(\d+)\s*(b|kb|kib|mb|mib)?$/i;
const DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h)?$/i;
const DURATION_UNITS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 };
const SIZE_UNITS: Record<string, number> = { b: 1, kb: 1000, kib: 1024, mb: 1_000_000, mib: 1024 * 1024 };

/** The variables, their defaults and meaning: the README's configuration table. */
export const CONFIG_DOC: [string, string, string][] = [
  ['PORT', '8000', 'TCP port to listen on'],
  ['HOST', '0.0.0.0', 'address to listen on'],
  ['DATABASE_URL', '(unset)', 'PostgreSQL URL; unset = embedded PGlite in DATA_DIR'],
  ['DATA_DIR', './data', 'directory of the embedded database'],
  ['LOG_LEVEL', 'info', 'fatal, error, warn, info, debug, trace or silent'],
  ['BODY_LIMIT', '1MiB', 'largest request body: bytes, or with kb/KiB/mb/MiB'],
  ['DEFAULT_POINTS_PER_JOB', '1', 'points of a success for models without their own points_per_job'],
  ['DB_POOL_MAX', '20', 'PostgreSQL connections of the pool'],
  ['REQUEST_TIMEOUT_MS', '30000', 'longest time to receive a whole request'],
  ['SHUTDOWN_TIMEOUT_MS', '10000', 'longest wait for in-flight requests on SIGTERM/SIGINT'],
  ['MIGRATE_ON_START', 'true', '`ins serve` applies pending migrations first (`--no-migrate` too)'],
  ['HEADERS_TIMEOUT_MS', '10000', 'longest time to receive request headers (slow clients are cut off)'],
  ['KEEP_ALIVE_TIMEOUT_MS', '65000', 'how long an idle keep-alive connection stays open'],
  ['TRUST_PROXY', 'false', 'behind a reverse proxy: client address from X-Forwarded-For'],
  ['RATE_LIMIT_PER_IP', String(DEFAULT_RATE_LIMITS.perIp), 'requests per minute per client address (0 = off)'],
  ['RATE_LIMIT_REPORTS_PER_KEY', String(DEFAULT_RATE_LIMITS.reportsPerKey), 'update_result calls per minute per key (0 = off)'],
  ['RATE_LIMIT_READS_PER_KEY', String(DEFAULT_RATE_LIMITS.readsPerKey), 'daily_points calls per minute per key (0 = off)'],
  ['RATE_LIMIT_AUTH_FAILURES_PER_IP', String(DEFAULT_RATE_LIMITS.authFailuresPerIp), 'failed authentications per minute per address, then 429 (0 = off)'],
  ['RATE_LIMIT_COMPLETIONS_PER_USER', String(DEFAULT_RATE_LIMITS.completionsPerUser), 'chat completions per minute per user key (0 = off)'],
  ['RATE_LIMIT_CONCURRENT_PER_USER', String(DEFAULT_RATE_LIMITS.concurrentPerUser), 'chat completions running at once per user key, per server (0 = off)'],
  ['CREDIT_POLICY', 'reports', 'reports: node keys credit any new job_id; dispatched: only jobs this service leased earn points'],
  ['MAX_ATTEMPTS', String(DEFAULT_COORDINATOR.maxAttempts), 'leases a job may have before it fails'],
  ['JOB_TIMEOUT', `${DEFAULT_COORDINATOR.jobTimeout}s`, "a job's deadline after submission (s, m, h; a request may ask for up to MAX_JOB_TIMEOUT)"],
  ['MAX_JOB_TIMEOUT', `${DEFAULT_COORDINATOR.maxJobTimeout / 3600}h`, 'the longest deadline a request may ask for'],
  ['LEASE_TIMEOUT', `${DEFAULT_COORDINATOR.leaseTimeout}s`, 'how long a node holds a job before it goes back to the queue'],
  ['MODELS_TTL', `${DEFAULT_COORDINATOR.modelsTtl / 3600}h`, "how long a node's model declaration lasts (workers re-send it every few hours)"],
  ['SWEEP_INTERVAL', `${DEFAULT_COORDINATOR.sweepInterval}s`, 'how often expired leases and deadlines are swept'],
  ['NODE_ONLINE_WINDOW', `${DEFAULT_COORDINATOR.onlineWindow}s`, 'a node seen this recently counts as online'],
];

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const problems: string[] = [];
  const get = (name: string): string | undefined => {
    const v = env[name];
    return v === undefined || v.trim() === '' ? undefined : v.trim();
  };
  const int = (name: string, fallback: number, min: number, max: number): number => {
    const raw = get(name);
    if (raw === undefined) return fallback;
    if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) {
      problems.push(`${name}=${JSON.stringify(raw)}: expected a whole number from ${min} to ${max}`);
      return fallback;
    }
    return Number(raw);
  };

  const port = int('PORT', 8000, 0, 65535);
  const dbPoolMax = int('DB_POOL_MAX', 20, 1, 1000);
  const shutdownTimeoutMs = int('SHUTDOWN_TIMEOUT_MS', 10_000, 0, 600_000);
  const requestTimeoutMs = int('REQUEST_TIMEOUT_MS', 30_000, 1_000, 600_000);
  const headersTimeoutMs = int('HEADERS_TIMEOUT_MS', 10_000, 100, 600_000);
  const keepAliveTimeoutMs = int('KEEP_ALIVE_TIMEOUT_MS', 65_000, 1_000, 3_600_000);
  const rateLimits: RateLimits = {
    perIp: int('RATE_LIMIT_PER_IP', DEFAULT_RATE_LIMITS.perIp, 0, 10_000_000),
    reportsPerKey: int('RATE_LIMIT_REPORTS_PER_KEY', DEFAULT_RATE_LIMITS.reportsPerKey, 0, 10_000_000),
    readsPerKey: int('RATE_LIMIT_READS_PER_KEY', DEFAULT_RATE_LIMITS.readsPerKey, 0, 10_000_000),
    authFailuresPerIp: int('RATE_LIMIT_AUTH_FAILURES_PER_IP', DEFAULT_RATE_LIMITS.authFailuresPerIp, 0, 10_000_000),
    completionsPerUser: int('RATE_LIMIT_COMPLETIONS_PER_USER', DEFAULT_RATE_LIMITS.completionsPerUser, 0, 10_000_000),
    concurrentPerUser: int('RATE_LIMIT_CONCURRENT_PER_USER', DEFAULT_RATE_LIMITS.concurrentPerUser, 0, 1_000_000),
  };

  const logLevel = (get('LOG_LEVEL') ?? 'info').toLowerCase();
  if (!LOG_LEVELS.includes(logLevel)) problems.push(`LOG_LEVEL=${JSON.stringify(logLevel)}: expected one of ${LOG_LEVELS.join(', ')}`);

  let bodyLimit = 1024 * 1024;
  const rawLimit = get('BODY_LIMIT');
  if (rawLimit !== undefined) {
    const m = SIZE.exec(rawLimit);
    const bytes = m ? Number(m[1]) * SIZE_UNITS[(m[2] ?? 'b').toLowerCase()]! : NaN;
    if (!(bytes >= 1024 && bytes <= 1024 ** 3)) problems.push(`BODY_LIMIT=${JSON.stringify(rawLimit)}: expected a size from 1KiB to 1GiB, e.g. 1048576 or 1MiB`);
    else bodyLimit = bytes;
  }

  let defaultPointsPerJob = 1;
  const rawPoints = get('DEFAULT_POINTS_PER_JOB');
  if (rawPoints !== undefined) {
    const n = parsePoints(rawPoints);
    if (n === undefined) problems.push(`DEFAULT_POINTS_PER_JOB=${JSON.stringify(rawPoints)}: expected a number >= 0, e.g. 1 or 0.5`);
    else defaultPointsPerJob = n;
  }

  const databaseUrl = get('DATABASE_URL');
  if (databaseUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    problems.push('DATABASE_URL: expected a postgres:// or postgresql:// URL (unset it to use the embedded database)');
  }

  const bool = (name: string, fallback: boolean): boolean => {
    const raw = (get(name) ?? String(fallback)).toLowerCase();
    if (!['true', 'false', '1', '0', 'yes', 'no'].includes(raw)) problems.push(`${name}=${JSON.stringify(raw)}: expected true or false`);
    return ['true', '1', 'yes'].includes(raw);
  };
  const duration = (name: string, fallback: number, min: number, max: number): number => {
    const raw = get(name);
    if (raw === undefined) return fallback;
    const m = DURATION.exec(raw);
    const seconds = m ? Number(m[1]) * DURATION_UNITS[(m[2] ?? 's').toLowerCase()]! : NaN;
    if (!(seconds >= min && seconds <= max)) {
      problems.push(`${name}=${JSON.stringify(raw)}: expected a duration from ${min} s to ${max} s, e.g. 30s, 5m or 6h`);
      return fallback;
    }
    return seconds;
  };
  const policy = get('CREDIT_POLICY') ?? 'reports';
  if (policy !== 'reports' && policy !== 'dispatched') problems.push(`CREDIT_POLICY=${JSON.stringify(policy)}: expected reports or dispatched`);
  const d = DEFAULT_COORDINATOR;
  const coordinator: CoordinatorConfig = {
    creditPolicy: policy === 'dispatched' ? 'dispatched' : 'reports',
    maxAttempts: int('MAX_ATTEMPTS', d.maxAttempts, 1, 100),
    jobTimeout: duration('JOB_TIMEOUT', d.jobTimeout, 1, 7 * 86400),
    maxJobTimeout: duration('MAX_JOB_TIMEOUT', d.maxJobTimeout, 1, 7 * 86400),
    leaseTimeout: duration('LEASE_TIMEOUT', d.leaseTimeout, 0.1, 7 * 86400),
    modelsTtl: duration('MODELS_TTL', d.modelsTtl, 1, 30 * 86400),
    sweepInterval: duration('SWEEP_INTERVAL', d.sweepInterval, 0.05, 3600),
    onlineWindow: duration('NODE_ONLINE_WINDOW', d.onlineWindow, 1, 86400),
  };
  if (coordinator.jobTimeout > coordinator.maxJobTimeout) problems.push(`JOB_TIMEOUT (${coordinator.jobTimeout} s) is longer than MAX_JOB_TIMEOUT (${coordinator.maxJobTimeout} s)`);
  const migrateOnStart = bool('MIGRATE_ON_START', true);
  const trustProxy = bool('TRUST_PROXY', false);

  if (problems.length > 0) throw new ConfigError(problems);
  return {
    port,
    host: get('HOST') ?? '0.0.0.0',
    databaseUrl,
    dataDir: path.resolve(get('DATA_DIR') ?? './data'),
    logLevel,
    bodyLimit,
    defaultPointsPerJob,
    dbPoolMax,
    shutdownTimeoutMs,
    requestTimeoutMs,
    migrateOnStart,
    headersTimeoutMs,
    keepAliveTimeoutMs,
    trustProxy,
    rateLimits,
    coordinator,
  };
}
