// Rate limits, all per minute and all configurable (0 turns one off):
// - per client IP on every route but the probes and /metrics (@fastify/rate-limit, onRequest);
// - per key on update_result and daily_points, so one leaked or buggy key cannot starve others;
// - failed authentications per IP, tighter: once an IP has used its budget of 401s, every
//   authentication from it is refused with 429 until the window ends, so guessing keys
//   learns nothing more. (The plugin counts every call; this needs a budget one can look at
//   without spending it, hence the small FailureLimiter below.)
// Every 429 carries Retry-After and a `detail`; every limited answer OpenAI's x-ratelimit-*-requests
// headers for the limiter closest to refusing (showLimit below). Per-key limits read the key where
// authentication reads it (http/credentials.ts), so varying another header changes nothing.
// Long polls are capped apart (LongPolls): past a cap a poll is not refused, it answers at once
// as with wait=0, which every client of the seed's wire already handles by polling again.
import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyReply, FastifyRequest, preHandlerAsyncHookHandler } from 'fastify';
import type { RateLimits } from '../config.js';
import { HttpError } from './http-error.js';
import { hashKey } from '../keys.js';
import { headerKey, requestKey } from './credentials.js';

const WINDOW_MS = 60_000;

export function tooMany(retryAfterSeconds: number): HttpError {
  const seconds = Math.max(1, Math.ceil(retryAfterSeconds));
  return new HttpError(429, `Too many requests; retry in ${seconds} s`, { 'retry-after': String(seconds) });
}

/**
 * Failed authentications per IP in fixed one-minute windows, bounded in memory. Only failures
 * are refused once an address is over its budget (refuse()): a valid key or token from it is
 * served. One address is often many nodes (a host with several, a NAT, a proxy without
 * TRUST_PROXY), and a worker whose node was disabled or whose key was rotated keeps polling with
 * what it had — the seed's worker never re-registers — so refusing the address would answer the
 * honest workers beside it 429, on which they stop for hours. Keys are 256 random bits: the
 * budget slows no guessing that could succeed.
 */
export class FailureLimiter {
  private readonly windows = new Map<string, { count: number; resetAt: number }>();
  constructor(
    private readonly max: number,
    private readonly maxEntries = 100_000,
  ) {}

  /** A failed attempt from `ip`: 429 (with when to retry) past its budget, else `refusal` (a 401), counted. */
  refuse(ip: string, refusal: HttpError): never {
    const blocked = this.blockedFor(ip);
    if (blocked > 0) throw tooMany(blocked);
    this.fail(ip);
    throw refusal;
  }

  /** Seconds to wait when this IP is over its budget, else 0. */
  blockedFor(ip: string, now = Date.now()): number {
    if (this.max <= 0) return 0;
    const w = this.windows.get(ip);
    if (!w || w.resetAt <= now) return 0;
    return w.count >= this.max ? (w.resetAt - now) / 1000 : 0;
  }

  fail(ip: string, now = Date.now()): void {
    if (this.max <= 0) return;
    let w = this.windows.get(ip);
    if (!w || w.resetAt <= now) {
      if (this.windows.size >= this.maxEntries) this.windows.delete(this.windows.keys().next().value!);
      w = { count: 0, resetAt: now + WINDOW_MS };
      this.windows.set(ip, w);
    }
    w.count++;
  }
}

/** How many calls of one key run at once; bounded in memory like the others. */
export class ConcurrencyLimiter {
  private readonly running = new Map<string, number>();
  constructor(private readonly max: number) {}

  /** Counts a call in; false (and nothing counted) when the key is at its limit. */
  enter(key: string): boolean {
    if (this.max <= 0) return true;
    const n = this.running.get(key) ?? 0;
    if (n >= this.max) return false;
    this.running.set(key, n + 1);
    return true;
  }

  leave(key: string): void {
    if (this.max <= 0) return;
    const n = (this.running.get(key) ?? 1) - 1;
    if (n <= 0) this.running.delete(key);
    else this.running.set(key, n);
  }
}

/**
 * Long polls (get_result and get_job with `wait`) waiting at once, per key and per client
 * address: each holds a connection and a waiter for up to 30 s, so one key or one address
 * must not hold thousands.
 */
export class LongPolls {
  private readonly perKey: ConcurrencyLimiter;
  private readonly perIp: ConcurrencyLimiter;
  constructor(maxPerKey: number, maxPerIp: number) {
    this.perKey = new ConcurrencyLimiter(maxPerKey);
    this.perIp = new ConcurrencyLimiter(maxPerIp);
  }

  /** The release of a poll that may wait, or undefined when either cap is reached (answer at once). */
  enter(key: string, ip: string): (() => void) | undefined {
    if (!this.perKey.enter(key)) return undefined;
    if (!this.perIp.enter(ip)) {
      this.perKey.leave(key);
      return undefined;
    }
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.perKey.leave(key);
      this.perIp.leave(ip);
    };
  }
}

export interface KeyLimiters {
  reports: preHandlerAsyncHookHandler | undefined;
  reads: preHandlerAsyncHookHandler | undefined;
  /** Chat completions per minute per user key. */
  completions: preHandlerAsyncHookHandler | undefined;
  /** job_progress calls per minute per job key. */
  progress: preHandlerAsyncHookHandler | undefined;
  /** Chat completions at once per user key (keyed by the user key's id). */
  concurrent: ConcurrencyLimiter;
  failures: FailureLimiter;
  longPolls: LongPolls;
}

// Reports carry the key in the body, reads in the header. Hashed: the limiter's memory holds
// no usable keys.
const bodyKey = (req: FastifyRequest): string => {
  const key = (req.body as { api_key?: unknown }).api_key;
  return `report:${hashKey(typeof key === 'string' ? key : '')}`;
};
const readKey = (req: FastifyRequest): string => `read:${hashKey(headerKey(req) ?? '')}`;
// The key authentication will read: api_key first, else Bearer (not the raw Authorization header).
const userKey = (req: FastifyRequest): string => `user:${hashKey(requestKey(req) ?? '')}`;

/**
 * OpenAI's rate-limit headers, each set from one limiter: the one of the request that has the
 * fewest calls left, so that limit, remaining and reset always describe the same window (never
 * the per-address limit beside a per-key remaining). Reset is OpenAI's duration ("12s", "1m0s").
 */
export const LIMIT_HEADER = 'x-ratelimit-limit-requests';
export const REMAINING_HEADER = 'x-ratelimit-remaining-requests';
export const RESET_HEADER = 'x-ratelimit-reset-requests';

export function resetDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`;
  const seconds = Math.ceil(ms / 1000);
  return seconds >= 60 ? `${Math.floor(seconds / 60)}m${seconds % 60}s` : `${seconds}s`;
}

interface Window {
  max: number;
  remaining: number;
  ttl: number;
}

function showLimit(reply: FastifyReply, w: Window): void {
  const shown = reply.getHeader(REMAINING_HEADER);
  if (shown !== undefined && Number(shown) < w.remaining) return;
  reply.header(LIMIT_HEADER, String(w.max));
  reply.header(REMAINING_HEADER, String(w.remaining));
  reply.header(RESET_HEADER, resetDuration(w.ttl));
}

export async function registerRateLimits(app: FastifyInstance, limits: RateLimits): Promise<KeyLimiters> {
  // The plugin's counting and store, through createRateLimit: its own hooks would write the
  // old x-ratelimit-* names, one set per limiter, each over the other.
  await app.register(rateLimit, { global: false, timeWindow: WINDOW_MS });
  // createRateLimit, not rateLimit(): the plugin's route handlers share a once-per-request
  // flag, so a second limiter on a route would be skipped after the per-IP one.
  const limiter = (max: number, keyGenerator: (req: FastifyRequest) => string) => {
    const check = app.createRateLimit({ max, timeWindow: WINDOW_MS, keyGenerator });
    return async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
      const r = await check(req);
      if (r.isAllowed) return;
      if (r.isExceeded) {
        showLimit(reply, { max: r.max, remaining: 0, ttl: r.ttl });
        throw tooMany(r.ttlInSeconds);
      }
      showLimit(reply, r);
    };
  };
  // Per client address on every request (unknown paths too) but the probes and /metrics
  // (config.rateLimit false, routes/operations.ts).
  if (limits.perIp > 0) {
    const perIp = limiter(limits.perIp, (req) => `ip:${req.ip}`);
    app.addHook('onRequest', async (req, reply) => {
      if ((req.routeOptions.config as { rateLimit?: unknown } | undefined)?.rateLimit === false) return;
      await perIp(req, reply);
    });
  }
  const perKey = (max: number, keyGenerator: (req: FastifyRequest) => string): preHandlerAsyncHookHandler | undefined =>
    max > 0 ? limiter(max, keyGenerator) : undefined;
  return {
    reports: perKey(limits.reportsPerKey, bodyKey),
    reads: perKey(limits.readsPerKey, readKey),
    completions: perKey(limits.completionsPerUser, userKey),
    progress: perKey(limits.progressPerKey, (req) => `progress:${bodyKey(req)}`),
    concurrent: new ConcurrencyLimiter(limits.concurrentPerUser),
    failures: new FailureLimiter(limits.authFailuresPerIp),
    longPolls: new LongPolls(limits.longPollsPerKey, limits.longPollsPerIp),
  };
}
