// Recording job results with exactly-once crediting — the path of every report, from the
// route (routes/update-result.ts) to its INSERT (results/credit.ts):
// 1. record() finds the model's id and joins the next batch (db/batcher.ts): concurrent
//    reports share one statement, CREDIT_REPORTS, which inserts the new job ids, upgrades
//    errors of the same node to successes, and adds both to the aggregates in one commit.
// 2. A report the statement left alone (its job id exists, and it is no upgrade) takes the
//    existing row FOR UPDATE (recordExisting), so concurrent duplicates queue behind each
//    other and each sees the state the previous one committed: a replay or a conflict.
//
// Job states (per job_id):   (none) --error--> error --success--> success
//                            (none) --success-----------------> success
// success is final; a repeat of the same report is a replay; error after error is a replay.
// A success verification reversed (reversed) is final too: a repeat is a replay, crediting nothing.
import type { Database, Queryable } from '../db/database.js';
import { Batcher, type BatcherOptions } from '../db/batcher.js';
import { sql } from '../db/database.js';
import { ensureModelId } from '../repositories/models.js';
import { CREDIT_REPORTS } from './credit.js';

export type ResultStatus = 'success' | 'error';

export interface Report {
  nodeId: number;
  jobId: string;
  modelName: string;
  status: ResultStatus;
  result: Record<string, unknown>;
  /** Points of a success when the model has no points_per_job of its own. */
  defaultPoints: number;
  /** Only for tests and imports; the service always uses the database clock. */
  receivedAt?: Date | string;
}

export type RecordOutcome =
  | { kind: 'recorded'; status: ResultStatus; points: number }
  | { kind: 'replayed'; status: ResultStatus }
  | { kind: 'conflict'; detail: string };

interface Credit {
  report: Report;
  modelId: number;
}

// A row past retention keeps its result's hash instead of its body (src/retention/sql.ts): the
// report is then the same if its result hashes the same (jsonb text is canonical: key order
// does not matter, as with the comparison of bodies).
const LOCK_EXISTING = sql(
  'results_lock_existing',
  `SELECT r.node_id, r.model_id, r.status,
    CASE WHEN r.result = 'null'::jsonb THEN r.result_hash = sha256(convert_to($2::jsonb::text, 'UTF8')) ELSE r.result = $2::jsonb END AS same_result
  FROM job_results r WHERE r.job_id = $1::text FOR UPDATE`,
);

const EXISTS = sql('results_exists', 'SELECT EXISTS (SELECT 1 FROM job_results WHERE job_id = $1::text) AS found');

/** reversed: a success whose points verification took back (src/verify/reversal.ts); final. */
interface Existing {
  node_id: number;
  model_id: number;
  status: ResultStatus | 'reversed';
  same_result: boolean;
}

/** The report's explicit time as ISO text, or null for the database's clock. */
const explicitTime = (r: Report): string | null => (r.receivedAt instanceof Date ? r.receivedAt.toISOString() : (r.receivedAt ?? null));

/**
 * Runs CREDIT_REPORTS for reports sharing one defaultPoints and one explicit time. For each:
 * its points if it was recorded, undefined if its job id exists and it is no upgrade.
 * `clock` (tests) stands in for the database's clock, unlike Report.receivedAt.
 */
async function credit(db: Queryable, batch: readonly Credit[], clock?: string): Promise<(number | undefined)[]> {
  const explicit = explicitTime(batch[0]!.report);
  const rows = await db.query<{ job_id: string; points: number }>(CREDIT_REPORTS, [
    batch.map((c) => c.report.jobId),
    batch.map((c) => c.report.nodeId),
    batch.map((c) => c.modelId),
    batch.map((c) => c.report.status),
    batch.map((c) => JSON.stringify(c.report.result)),
    batch[0]!.report.defaultPoints,
    explicit ?? clock ?? null,
    explicit !== null,
  ]);
  const points = new Map(rows.map((r) => [r.job_id, r.points]));
  return batch.map((c) => points.get(c.report.jobId));
}

function decide(existing: Existing, r: Report, modelId: number): RecordOutcome | 'upgrade' {
  if (Number(existing.node_id) !== r.nodeId) {
    return { kind: 'conflict', detail: `Job ${r.jobId} was already reported by another node` };
  }
  if (existing.model_id !== modelId) {
    return { kind: 'conflict', detail: `Job ${r.jobId} was recorded for another model` };
  }
  if (existing.status === 'success') {
    if (r.status === 'success' && existing.same_result) return { kind: 'replayed', status: 'success' };
    return { kind: 'conflict', detail: `Job ${r.jobId} already succeeded with a different report` };
  }
  if (existing.status === 'reversed') {
    if (r.status === 'success' && existing.same_result) return { kind: 'replayed', status: 'success' };
    return { kind: 'conflict', detail: `Job ${r.jobId}: its points were taken back (the node's answers failed verification)` };
  }
  // Recorded as error.
  return r.status === 'success' ? 'upgrade' : { kind: 'replayed', status: 'error' };
}

/** The outcome of a report whose job id may already exist, one report at a time. */
async function recordExisting(db: Database, c: Credit, clock?: string): Promise<RecordOutcome> {
  const r = c.report;
  return db.transaction(async (tx: Queryable) => {
    const [existing] = await tx.query<Existing>(LOCK_EXISTING, [r.jobId, JSON.stringify(r.result)]);
    // No row: the concurrent insert we collided with rolled back. An upgrade: the row changed
    // after the batch's statement saw it. Either way the credit statement decides, under the lock.
    const decision = existing ? decide(existing, r, c.modelId) : 'upgrade';
    if (decision !== 'upgrade') return decision;
    const [points] = await credit(tx, [c], clock);
    if (points !== undefined) return { kind: 'recorded', status: r.status, points };
    return { kind: 'conflict', detail: `Job ${r.jobId} is being reported concurrently; retry` };
  });
}

export interface RecorderOptions {
  batch?: Omit<BatcherOptions, 'alone'>;
  /**
   * Tests only: the time new reports are received at, standing in for the database's clock
   * (unlike Report.receivedAt, which stands for an explicit time, as imports give).
   */
  clock?: () => string;
}

/** Records reports exactly once, sharing statements between concurrent ones. */
export class ResultRecorder {
  private readonly batcher: Batcher<Credit, number | undefined>;
  private readonly clock?: () => string;

  constructor(
    private readonly db: Database,
    opts: RecorderOptions = {},
  ) {
    // alone: one report the database refuses (a value it cannot take) must not fail the others
    // of its batch; alone, each gets its own answer (db/batcher.ts).
    this.batcher = new Batcher((batch) => this.creditBatch(batch), { ...(opts.batch ?? { maxBatch: 64, maxInFlight: 4 }), alone: true });
    this.clock = opts.clock;
  }

  /** Whether a result of this job id is recorded. */
  async has(jobId: string): Promise<boolean> {
    const [row] = await this.db.query<{ found: boolean }>(EXISTS, [jobId]);
    return row!.found;
  }

  async record(report: Report): Promise<RecordOutcome> {
    const c = { report, modelId: await ensureModelId(this.db, report.modelName) };
    const points = await this.batcher.load(c);
    if (points !== undefined) return { kind: 'recorded', status: report.status, points };
    return recordExisting(this.db, c, this.clock?.());
  }

  // All or nothing, as the batcher's `alone` needs: one statement, or one transaction when the
  // batch holds several groups. A deadlock with another server's batch is retried by the
  // database layer (db/pg.ts).
  private async creditBatch(batch: Credit[]): Promise<(number | undefined)[]> {
    // One statement takes one job_id once, one default and one explicit time: the rest of
    // the batch waits for the path of existing rows, or for a group of its own.
    const seen = new Set<string>();
    const groups = new Map<string, Credit[]>();
    for (const c of batch) {
      if (seen.has(c.report.jobId)) continue;
      seen.add(c.report.jobId);
      const key = `${c.report.defaultPoints} ${explicitTime(c.report) ?? ''}`;
      groups.set(key, [...(groups.get(key) ?? []), c]);
    }
    const points = new Map<Credit, number | undefined>();
    const clock = this.clock?.();
    const run = async (db: Queryable) => {
      for (const group of groups.values()) (await credit(db, group, clock)).forEach((p, i) => points.set(group[i]!, p));
    };
    if (groups.size === 1) await run(this.db);
    else await this.db.transaction(run);
    return batch.map((c) => points.get(c));
  }
}
