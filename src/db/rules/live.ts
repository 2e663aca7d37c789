// The one "live session" rule, included as text (like db/rules/suspended.ts, and for the same
// reason: a SQL function with a subquery is never inlined) by every statement that asks which
// nodes are online now: the network's and /v1/models' counts (src/jobs/network.ts, read.ts),
// who may run a copy or a score check (src/verify/copies.ts, scores.ts), and whether a queued
// job still has a node that may take it (src/jobs/sql/sweep.ts); and, through sessionHolds, the
// sessions a token finds (src/repositories/sessions.ts), a node's listing (repositories/nodes.ts,
// jobs/network.ts) and a canary's build (verify/canaries.ts). No statement writes it by hand. A session is live when it has
// not ended, its node is enabled and still has the key the session was opened with, and it was
// seen within the online window (NODE_ONLINE_WINDOW; workers poll or send a heartbeat well
// within it). The arguments are SQL expressions: the session's and the node's aliases, and the
// parameters holding the windows in seconds.
import { nodeSuspended } from './suspended.js';

/**
 * SQL: whether session `s` (joined to its node `n`) still holds: not ended, its node enabled and
 * still with the key the session was opened with. The lease round and the hand-off (src/jobs/sql/
 * lease.ts, submit.ts) ask this of a poll that is already waiting: a node disabled or given a
 * new key meanwhile (on any server) gets no job, even before the announcement ends its polls.
 */
export const sessionHolds = (s: string, n: string): string =>
  `${s}.ended_at IS NULL AND ${n}.disabled_at IS NULL AND ${n}.key_hash = ${s}.node_key_hash`;

/** SQL: whether session `s` (joined to its node `n`) is live, seen within `onlineWindow` seconds. */
export const liveSession = (s: string, n: string, onlineWindow: string): string =>
  `${sessionHolds(s, n)} AND ${s}.last_seen_at > now() - make_interval(secs => ${onlineWindow}::float8)`;

/** SQL: whether session `s`'s model declaration is younger than `modelsTtl` seconds (older ones are forgotten). */
export const modelsDeclared = (s: string, modelsTtl: string): string =>
  `${s}.models_declared_at > now() - make_interval(secs => ${modelsTtl}::float8)`;

/**
 * SQL: whether session `s` of node `n` may be given work now: live, its models declared within
 * MODELS_TTL, its node not suspended. Which models and capabilities are the caller's to ask.
 */
export const servingSession = (s: string, n: string, onlineWindow: string, modelsTtl: string): string =>
  `${liveSession(s, n, onlineWindow)} AND ${modelsDeclared(s, modelsTtl)} AND NOT ${nodeSuspended(`${s}.node_id`)}`;
