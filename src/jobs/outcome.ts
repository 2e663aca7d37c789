// What a lifecycle transition changed — the one shape every transition returns (src/jobs/sql/)
// and every consumer applies (lifecycle.ts apply()): the dispatcher, the result watch, the
// progress relay, the verifier, the metrics. Each statement announces its outcome through the
// database function jobs_announce() (migrations/0007_job_lifecycle.sql): the same text is
// returned to the statement's caller and sent to every server (NOTIFY ins_jobs), so an outcome
// reads the same whether this server's statement made it or another server's did. What only
// the statement's own server can know (the answers at hand, the leases handed out, the nodes
// that gave up a job twice) travels beside it, in the local part.
import type { Answer, Usage } from './answer.js';
import type { JobState } from './states.js';

export const JOBS_CHANNEL = 'ins_jobs';

/** A job done by a statement of this server, with what its waiter reads. */
export interface DoneJob {
  state: 'done';
  result: Answer;
  usage: Usage | null;
  queuedSeconds: number | null;
  /** The node that did it (its metrics label). */
  nodeId: number | null;
}

export interface FinishedJob {
  state: JobState;
  model: number;
}

export interface Outcome {
  /** Jobs that became queued, per model: submitted, or back in the queue. */
  queued: Map<number, number>;
  /** Copies of jobs (verification, src/verify/) queued, per model: only some nodes may take them. */
  copies: Map<number, number>;
  /** Jobs that reached a final state: job id → its state and model. */
  finished: Map<string, FinishedJob>;
  /** Leases that ended with their job going back to the queue: job id → attempt. */
  requeuedLeases: Map<string, number>;
  /** Known only to the server whose statement made the change. */
  local?: LocalOutcome;
}

export interface LocalOutcome {
  /** Jobs this statement finished as done, with their answers: waiters here need not read them. */
  done?: Map<string, DoneJob>;
  /** Leases handed out: how long each job had waited in the queue (seconds). */
  leased?: number[];
  /** Leases ended because their time or their job's deadline was up (the sweeper). */
  leasesExpired?: number;
  /** A node gave up a job it had given up before: it does not get it back, and it counts against the node. */
  repeatGiveUps?: { nodeId: number; jobId: string }[];
  /** Attempts that ended by their node's fault (an error report, a lease that ran out): they count against it. */
  nodeFailures?: { nodeId: number; jobId: string }[];
  /** Jobs (not copies) a node failed by claiming their request was at fault: verification audits the claims (verify/request-errors.ts). */
  requestErrors?: { nodeId: number; jobId: string }[];
}

/** Whoever acts on outcomes; `local`: this server's statement made it (else another server's). */
export interface OutcomeConsumer {
  apply(outcome: Outcome, local: boolean): void;
}

export const emptyOutcome = (): Outcome => ({ queued: new Map(), copies: new Map(), finished: new Map(), requeuedLeases: new Map() });

/** The outcome an announcement's items say (jobs_announce's format); unknown items are skipped. */
export function parseItems(text: string): Outcome {
  const o = emptyOutcome();
  if (text === '') return o;
  for (const item of text.split(',')) {
    const [kind, a, b, c] = item.split(':');
    if (a === undefined || b === undefined) continue;
    if (kind === 'q' || kind === 'c') {
      const model = Number(a);
      const n = Number(b);
      if (Number.isInteger(model) && n > 0) (kind === 'q' ? o.queued : o.copies).set(model, n);
    } else if (kind === 'f') {
      o.finished.set(a, { state: b as JobState, model: Number(c) });
    } else if (kind === 'e') {
      o.requeuedLeases.set(a, Number(b));
    }
  }
  return o;
}

/** A NOTIFY ins_jobs payload: its sender's server id and the outcome it announces. */
export function parsePayload(payload: string): { server: string; outcome: Outcome } {
  const space = payload.indexOf(' ');
  if (space < 0) return { server: payload, outcome: emptyOutcome() };
  return { server: payload.slice(0, space), outcome: parseItems(payload.slice(space + 1)) };
}

/** Whether the outcome changed anything a consumer acts on. */
export function isEmpty(o: Outcome): boolean {
  return o.queued.size === 0 && o.copies.size === 0 && o.finished.size === 0 && o.requeuedLeases.size === 0 && o.local === undefined;
}
