// Prometheus metrics of one app instance (its own registry, so several apps in one process,
// as in tests, do not collide): requests by route and status, latency, results recorded,
// points credited, and the database pool.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Database } from '../db/database.js';
import { openLeases, queueDepth } from '../jobs/read.js';
import { standingCounts } from '../verify/standing.js';
import { nodeNameOf } from '../repositories/nodes.js';
import type { AuditReport } from '../verify/auditor.js';
import type { Outcome, OutcomeConsumer } from '../jobs/outcome.js';
import type { NodeConsumer, NodeOutcome } from '../nodes/outcome.js';

export interface Metrics {
  registry: Registry;
  requests: Counter<'method' | 'route' | 'status'>;
  duration: Histogram<'method' | 'route' | 'status'>;
  results: Counter<'status' | 'outcome'>;
  points: Counter;
  keyLookups: Counter<'source'>;
  statements: Histogram<'statement'>;
  dispatchLatency: Histogram;
  jobsFinished: Counter<'state'>;
  leaseExpiries: Counter;
  jobsSubmitted: Counter;
  completions: Counter<'model' | 'outcome'>;
  completionFirstByte: Histogram;
  completionQueueWait: Histogram;
  timeToFirstToken: Histogram<'model' | 'node'>;
  requestQueueTime: Histogram<'model' | 'node'>;
  outputTokensPerSecond: Histogram<'model' | 'node'>;
  /** The `node` label's value for a node id (bounded: NodeLabels). */
  nodeLabels: NodeLabels;
  verification: Counter<'event'>;
  strikes: Counter<'kind'>;
  pointsReversed: Counter;
  backgroundFailures: Counter<'task'>;
  pendingPolls: Counter<'source'>;
  /** get_result polls (no wait) that found the job final, by where its answer came from. */
  finishedPolls: Counter<'source'>;
  /** The points ledger: days closed, and looks that failed (logged; retried at the next look). */
  ledgerDaysClosed: Counter;
  ledgerCloseFailures: Counter;
  /** Retention: rows deleted (jobs, leases) or pruned to a hash (results). */
  retentionPruned: Counter;
  nodeTransitions: Counter;
  /** Read at each scrape; the app points them at the coordinator. */
  live: { waitingWorkers: () => number };
}

export function createMetrics(db: Database, withProcessMetrics: boolean): Metrics {
  const registry = new Registry();
  if (withProcessMetrics) collectDefaultMetrics({ register: registry });
  const labelNames = ['method', 'route', 'status'] as const;
  const requests = new Counter({ name: 'http_requests_total', help: 'HTTP requests by route and status', labelNames, registers: [registry] });
  const duration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request latency',
    labelNames,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  const results = new Counter({
    name: 'ins_results_total',
    help: 'Job results by reported status and outcome (recorded, replayed, conflict, refused)',
    labelNames: ['status', 'outcome'],
    registers: [registry],
  });
  const points = new Counter({ name: 'ins_points_credited_total', help: 'Points credited to nodes', registers: [registry] });
  const keyLookups = new Counter({
    name: 'ins_key_lookups_total',
    help: 'API key lookups by source (cache or database)',
    labelNames: ['source'],
    registers: [registry],
  });
  const statements = new Histogram({
    name: 'ins_db_statement_duration_seconds',
    help: 'Database statement latency by statement name (src/db/database.ts Sql.name)',
    labelNames: ['statement'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
    registers: [registry],
  });
  new Gauge({
    name: 'ins_db_pool_connections',
    help: 'Database pool connections by state',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const s = db.poolStats();
      this.set({ state: 'total' }, s.total);
      this.set({ state: 'idle' }, s.idle);
      this.set({ state: 'waiting' }, s.waiting);
    },
  });
  // The coordinator (jobs/): the queue and leases are read from the database at each scrape.
  new Gauge({
    name: 'ins_jobs_queued',
    help: 'Queued jobs by model',
    labelNames: ['model'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const q of await queueDepth(db)) this.set({ model: q.model }, q.n);
    },
  });
  new Gauge({
    name: 'ins_job_leases_open',
    help: 'Jobs leased to nodes right now',
    registers: [registry],
    async collect() {
      this.set(await openLeases(db));
    },
  });
  const live = { waitingWorkers: () => 0 };
  new Gauge({
    name: 'ins_workers_waiting',
    help: 'get_job polls waiting for a job on this server',
    registers: [registry],
    collect() {
      this.set(live.waitingWorkers());
    },
  });
  const dispatchLatency = new Histogram({
    name: 'ins_dispatch_latency_seconds',
    help: "From a job's submission to its lease (the latest lease when it was requeued)",
    registers: [registry],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 120],
  });
  const jobsFinished = new Counter({
    name: 'ins_jobs_finished_total',
    help: 'Jobs that reached a final state, by state (done, failed, expired, canceled)',
    labelNames: ['state'],
    registers: [registry],
  });
  const leaseExpiries = new Counter({
    name: 'ins_lease_expiries_total',
    help: "Leases ended by the sweeper: their time or the job's deadline was up",
    registers: [registry],
  });
  const jobsSubmitted = new Counter({ name: 'ins_jobs_submitted_total', help: 'Jobs submitted', registers: [registry] });
  // The OpenAI-compatible API (routes/openai/).
  const completions = new Counter({
    name: 'ins_completions_total',
    help: 'Chat completions by model and outcome (done, failed, expired, timeout, canceled, gone, model_not_found)',
    labelNames: ['model', 'outcome'],
    registers: [registry],
  });
  const completionFirstByte = new Histogram({
    name: 'ins_completion_first_byte_seconds',
    help: 'Chat completions: from the request to the first byte of the answer (the role chunk when streaming)',
    registers: [registry],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 120],
  });
  const completionQueueWait = new Histogram({
    name: 'ins_completion_queue_wait_seconds',
    help: "Chat completions: from the job's submission to its first lease",
    registers: [registry],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 120],
  });
  // Per model and node, named as vLLM names its own (time_to_first_token_seconds,
  // request_queue_time_seconds) and the OpenTelemetry GenAI conventions' gen_ai.server.time_to_first_token
  // (whose metrics are not stable yet: no gen_ai_* names of our own): every front door's jobs
  // (routes/front/run.ts). The node is the one that did the job (its first token's, unless
  // another node continued the answer); `node` takes at most MAX_NODE_LABELS names (NodeLabels).
  const timeToFirstToken = new Histogram({
    name: 'ins_time_to_first_token_seconds',
    help: 'Streamed completions (every front door): from the request to the first token of the answer relayed to the client, by model and node',
    labelNames: ['model', 'node'],
    registers: [registry],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 30, 120],
  });
  const requestQueueTime = new Histogram({
    name: 'ins_request_queue_time_seconds',
    help: "Completions (every front door): from the job's submission to its first lease, by model and node",
    labelNames: ['model', 'node'],
    registers: [registry],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 120],
  });
  const outputTokensPerSecond = new Histogram({
    name: 'ins_output_tokens_per_second',
    help: 'Completions (every front door) whose node counted its tokens: output tokens over the time from the first lease to the answer, by model and node',
    labelNames: ['model', 'node'],
    registers: [registry],
    buckets: [1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640, 1280],
  });
  // Verification (verify/): the share of jobs checked twice is copies / audited.
  const verification = new Counter({
    name: 'ins_verification_total',
    labelNames: ['event'],
    registers: [registry],
    help: 'Verification: jobs audited, copies (a job run again by another node), probes, canaries (the lone node of a model sent the request of a stored reference answer as an ordinary job), agreements, disagreements (then a third node decides), suspensions, set_aside (jobs whose audit failed on their own, left unaudited), score_check and score_judged (token-level checks), scorers_disagreed (two scorers that found an answer foreign each in its own way: no verdict), unconfirmed (a score verdict on the word of one party that no second scorer or third node was online to confirm: no verdict), replay_unchecked (a suspected replay no other node could check: no verdict)',
  });
  const strikes = new Counter({
    name: 'ins_strikes_total',
    help: 'Strikes against nodes by kind (disagreement, replay, too_fast, give_up, failure, impostor, false_request_error, false_score)',
    labelNames: ['kind'],
    registers: [registry],
  });
  const pointsReversed = new Counter({
    name: 'ins_points_reversed_total',
    help: "Points taken back: the jobs of strikes, and suspended nodes' recent work",
    registers: [registry],
  });
  const backgroundFailures = new Counter({
    name: 'ins_background_failures_total',
    labelNames: ['task'],
    registers: [registry],
    help: 'Background work that failed and was given up or will be tried again (coordinator: sweeps, hand-offs, outcome consumers; verification: audits, maintenance; retention: a look at what is past JOB_RETENTION)',
  });
  const pendingPolls = new Counter({
    name: 'ins_pending_polls_total',
    labelNames: ['source'],
    registers: [registry],
    help: 'get_result polls of a job still open (404), by where the answer came from: memory (no statement) or database',
  });
  const finishedPolls = new Counter({
    name: 'ins_finished_polls_total',
    labelNames: ['source'],
    registers: [registry],
    help: 'get_result polls (no wait) of a job in a final state, by where the answer came from: memory (a polled job this server finished as done; no statement) or database',
  });
  new Gauge({
    name: 'ins_nodes_by_standing',
    help: 'Nodes by standing (trusted, probation, suspended)',
    labelNames: ['standing'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const [standing, n] of Object.entries(await standingCounts(db))) this.set({ standing }, n);
    },
  });
  const ledgerDaysClosed = new Counter({
    name: 'ins_ledger_days_closed_total',
    help: 'Days this server closed into the signed points ledger',
    registers: [registry],
  });
  const ledgerCloseFailures = new Counter({
    name: 'ins_ledger_close_failures_total',
    help: 'Looks for days to close that failed (logged; retried at the next look)',
    registers: [registry],
  });
  const retentionPruned = new Counter({
    name: 'ins_retention_pruned_total',
    help: 'Rows retention removed past JOB_RETENTION: finished jobs and their leases deleted, report bodies replaced by their hash (results), usage counters of past days (usage), idle fair-queue lanes (lanes), worker sessions long unseen (sessions), token-level check records (token_checks), canary references (canaries)',
    labelNames: ['what'],
    registers: [registry],
  });
  const nodeTransitions = new Counter({
    name: 'ins_node_transitions_total',
    help: 'Node lifecycle transitions this server made, by change (added, disabled, enabled, rotated, registered, deregistered, declared, struck, suspended, restored): src/nodes/states.ts',
    labelNames: ['change'],
    registers: [registry],
  });
  return {
    nodeTransitions,
    registry,
    requests,
    duration,
    results,
    points,
    keyLookups,
    statements,
    dispatchLatency,
    jobsFinished,
    leaseExpiries,
    jobsSubmitted,
    completions,
    completionFirstByte,
    completionQueueWait,
    timeToFirstToken,
    requestQueueTime,
    outputTokensPerSecond,
    nodeLabels: new NodeLabels((id) => nodeNameOf(db, id)),
    verification,
    strikes,
    pointsReversed,
    backgroundFailures,
    pendingPolls,
    finishedPolls,
    ledgerDaysClosed,
    ledgerCloseFailures,
    retentionPruned,
    live,
  };
}

/** Most node names a `node` label takes; the nodes after them are "other" (each name is a series per model and bucket). */
export const MAX_NODE_LABELS = 64;

/**
 * The `node` label of a job's metrics: the node's name, for the first MAX_NODE_LABELS nodes this
 * server labels; "other" after them, so that a network of thousands of nodes cannot grow the
 * series without bound; "none" for a job no node did. Names are read once per node.
 */
export class NodeLabels {
  private readonly names = new Map<number, Promise<string>>();

  constructor(private readonly nameOf: (id: number) => Promise<string | undefined>) {}

  of(id: number | null): Promise<string> {
    if (id === null) return Promise.resolve('none');
    const known = this.names.get(id);
    if (known) return known;
    if (this.names.size >= MAX_NODE_LABELS) return Promise.resolve('other');
    const name = this.nameOf(id).then(
      (n) => n ?? 'other',
      () => {
        // A database blip: this time "other", the next observation asks again.
        this.names.delete(id);
        return 'other';
      },
    );
    this.names.set(id, name);
    return name;
  }
}

/** What an audit batch found (verify/auditor.ts). */
export function recordAudit(m: Metrics, r: AuditReport): void {
  m.verification.inc({ event: 'audited' }, r.audited);
  if (r.copies) m.verification.inc({ event: 'copy' }, r.copies);
  if (r.scoreChecks) m.verification.inc({ event: 'score_check' }, r.scoreChecks);
  if (r.scoresJudged) m.verification.inc({ event: 'score_judged' }, r.scoresJudged);
  if (r.scorersDisagreed) m.verification.inc({ event: 'scorers_disagreed' }, r.scorersDisagreed);
  if (r.scoresUnconfirmed) m.verification.inc({ event: 'unconfirmed' }, r.scoresUnconfirmed);
  if (r.replaysUnchecked) m.verification.inc({ event: 'replay_unchecked' }, r.replaysUnchecked);
  if (r.agreements) m.verification.inc({ event: 'agreement' }, r.agreements);
  if (r.disagreements) m.verification.inc({ event: 'disagreement' }, r.disagreements);
  if (r.suspended.length) m.verification.inc({ event: 'suspension' }, r.suspended.length);
  if (r.setAside.length) m.verification.inc({ event: 'set_aside' }, r.setAside.length);
  for (const s of r.strikes) m.strikes.inc({ kind: s.kind });
  if (r.reversedPoints) m.pointsReversed.inc(r.reversedPoints);
}

/**
 * The job lifecycle's outcomes as metrics (a consumer, jobs/lifecycle.ts): each server counts the
 * transitions its own statements made, so the sum over servers counts each once.
 */
export function outcomeMetrics(m: Metrics): OutcomeConsumer {
  return {
    apply(o: Outcome, local: boolean): void {
      if (!local) return;
      const byState = new Map<string, number>();
      for (const { state } of o.finished.values()) byState.set(state, (byState.get(state) ?? 0) + 1);
      for (const [state, n] of byState) m.jobsFinished.inc({ state }, n);
      for (const seconds of o.local?.leased ?? []) m.dispatchLatency.observe(seconds);
      if (o.local?.leasesExpired) m.leaseExpiries.inc(o.local.leasesExpired);
    },
  };
}

/**
 * The node lifecycle's outcomes as metrics (a consumer, nodes/lifecycle.ts): each server counts
 * the transitions its own statements made (a CLI command counts in no server's).
 */
export function nodeMetrics(m: Metrics): NodeConsumer {
  return {
    apply(o: NodeOutcome, local: boolean): void {
      if (local && o.change !== 'keys') m.nodeTransitions.inc({ change: o.change });
    },
  };
}

/** A model's (and node's) medians this server measured: GET /network's `latency`. */
export interface LatencyRow {
  model: string;
  node: string | null;
  completions: number;
  time_to_first_token_seconds_p50: number | null;
  request_queue_time_seconds_p50: number | null;
  output_tokens_per_second_p50: number | null;
}

type Buckets = Map<number, number>;

/** The median of a histogram's cumulative buckets, interpolated within its bucket as Prometheus's histogram_quantile does. */
function medianOf(buckets: Buckets): number | null {
  const bounds = [...buckets.keys()].sort((a, b) => a - b);
  const total = buckets.get(Infinity) ?? 0;
  if (total === 0) return null;
  let below = 0;
  let lower = 0;
  for (const le of bounds) {
    const n = buckets.get(le)!;
    if (n >= total / 2) {
      if (le === Infinity) return lower;
      return n === below ? le : lower + ((le - lower) * (total / 2 - below)) / (n - below);
    }
    below = n;
    lower = le;
  }
  return null;
}

/** Per model and node (`byNode`), or per model with every node's jobs together: the medians of the three latency metrics. */
export async function latencySummary(m: Metrics, byNode: boolean): Promise<LatencyRow[]> {
  const groups = new Map<string, { model: string; node: string | null; h: Record<string, Buckets> }>();
  const names = { ttft: m.timeToFirstToken, queue: m.requestQueueTime, rate: m.outputTokensPerSecond };
  for (const [which, histogram] of Object.entries(names)) {
    for (const v of (await histogram.get()).values) {
      if (v.metricName?.endsWith('_bucket') !== true) continue;
      const model = String(v.labels.model);
      const node = byNode ? String(v.labels.node) : null;
      const id = `${model}\u0000${node ?? ''}`;
      let g = groups.get(id);
      if (!g) groups.set(id, (g = { model, node, h: {} }));
      const buckets = (g.h[which] ??= new Map());
      const bound = (v.labels as Record<string, string | number | undefined>).le;
      const le = bound === '+Inf' ? Infinity : Number(bound);
      buckets.set(le, (buckets.get(le) ?? 0) + v.value);
    }
  }
  return [...groups.values()]
    .map((g) => ({
      model: g.model,
      node: g.node,
      completions: g.h.queue?.get(Infinity) ?? 0,
      time_to_first_token_seconds_p50: g.h.ttft ? medianOf(g.h.ttft) : null,
      request_queue_time_seconds_p50: g.h.queue ? medianOf(g.h.queue) : null,
      output_tokens_per_second_p50: g.h.rate ? medianOf(g.h.rate) : null,
    }))
    .sort((a, b) => (a.model === b.model ? String(a.node).localeCompare(String(b.node)) : a.model < b.model ? -1 : 1));
}
