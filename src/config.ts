// Configuration from the environment, validated as a whole: every problem is reported, each
// on its own line, and the process exits 1 before doing anything.
import path from 'node:path';
import { parsePoints } from './points-value.js';
import { EnvReader } from './config-env.js';
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
  verify: VerifyConfig;
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
  ...VERIFY_CONFIG_DOC,
];

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
  };

  const logLevel = (r.get('LOG_LEVEL') ?? 'info').toLowerCase();
  if (!LOG_LEVELS.includes(logLevel)) problems.push(`LOG_LEVEL=${JSON.stringify(logLevel)}: expected one of ${LOG_LEVELS.join(', ')}`);

  let defaultPointsPerJob = 1;
  const rawPoints = r.get('DEFAULT_POINTS_PER_JOB');
  if (rawPoints !== undefined) {
    const n = parsePoints(rawPoints);
    if (n === undefined) problems.push(`DEFAULT_POINTS_PER_JOB=${JSON.stringify(rawPoints)}: expected a number >= 0, e.g. 1 or 0.5`);
    else defaultPointsPerJob = n;
  }

  const databaseUrl = r.get('DATABASE_URL');
  if (databaseUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    problems.push('DATABASE_URL: expected a postgres:// or postgresql:// URL (unset it to use the embedded database)');
  }

  const policy = r.get('CREDIT_POLICY') ?? 'reports';
  if (policy !== 'reports' && policy !== 'dispatched') problems.push(`CREDIT_POLICY=${JSON.stringify(policy)}: expected reports or dispatched`);
  const d = DEFAULT_COORDINATOR;
  const coordinator: CoordinatorConfig = {
    creditPolicy: policy === 'dispatched' ? 'dispatched' : 'reports',
    maxAttempts: r.int('MAX_ATTEMPTS', d.maxAttempts, 1, 100),
    jobTimeout: r.duration('JOB_TIMEOUT', d.jobTimeout, 1, 7 * 86400),
    maxJobTimeout: r.duration('MAX_JOB_TIMEOUT', d.maxJobTimeout, 1, 7 * 86400),
    leaseTimeout: r.duration('LEASE_TIMEOUT', d.leaseTimeout, 0.1, 7 * 86400),
    modelsTtl: r.duration('MODELS_TTL', d.modelsTtl, 1, 30 * 86400),
    sweepInterval: r.duration('SWEEP_INTERVAL', d.sweepInterval, 0.05, 3600),
    onlineWindow: r.duration('NODE_ONLINE_WINDOW', d.onlineWindow, 1, 86400),
  };
  if (coordinator.jobTimeout > coordinator.maxJobTimeout) problems.push(`JOB_TIMEOUT (${coordinator.jobTimeout} s) is longer than MAX_JOB_TIMEOUT (${coordinator.maxJobTimeout} s)`);

  const config: Config = {
    port: r.int('PORT', 8000, 0, 65535),
    host: r.get('HOST') ?? '0.0.0.0',
    databaseUrl,
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
    trustProxy: r.bool('TRUST_PROXY', false),
    rateLimits,
    coordinator,
    verify: readVerifyConfig(r),
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}
