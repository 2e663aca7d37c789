// New job results of concurrent requests, recorded together: one statement inserts every
// report of a batch whose job_id is new and adds them to the aggregates, in one commit
// (db/batcher.ts, results.ts insertNewResults). A report whose job_id already exists — a
// replay, an upgrade, a conflict — is left out by ON CONFLICT DO NOTHING and then goes
// through recordExisting, which takes the existing row FOR UPDATE; so the outcomes are those
// of recordResult, report by report.
import type { Database } from '../db/database.js';
import { Batcher, type BatcherOptions } from '../db/batcher.js';
import { isUnavailable } from '../db/errors.js';
import { ensureModelId } from './models.js';
import { explicitTime, insertNewResults, recordExisting, type NewResult, type RecordOutcome, type Report } from './results.js';

const toError = (e: unknown): Error => (e instanceof Error ? e : new Error(String(e)));

export interface RecorderOptions {
  batch?: BatcherOptions;
  /**
   * Tests only: the time new reports are received at, standing in for the database's clock
   * (unlike Report.receivedAt, which stands for an explicit time, as imports give).
   */
  clock?: () => string;
}

/** Records reports with the outcomes of recordResult, sharing statements between concurrent ones. */
export class ResultRecorder {
  private readonly batcher: Batcher<NewResult, number | undefined | Error>;
  private readonly clock?: () => string;

  constructor(private readonly db: Database, opts: RecorderOptions = {}) {
    this.batcher = new Batcher((batch) => this.insertBatch(batch), opts.batch ?? { maxBatch: 64, maxInFlight: 4 });
    this.clock = opts.clock;
  }

  async record(report: Report): Promise<RecordOutcome> {
    const modelId = await ensureModelId(this.db, report.modelName);
    const inserted = await this.batcher.load({ report, modelId });
    if (inserted instanceof Error) throw inserted;
    if (inserted !== undefined) return { kind: 'recorded', status: report.status, points: inserted };
    return recordExisting(this.db, report, modelId);
  }

  // A deadlock with another server's batch is retried by the database layer (db/pg.ts).
  private insert(batch: NewResult[]): Promise<(number | undefined)[]> {
    return insertNewResults(this.db, batch, this.clock?.());
  }

  private async insertBatch(batch: NewResult[]): Promise<(number | undefined | Error)[]> {
    // One statement takes one job_id once, one default and one explicit time: the rest of
    // the batch waits for the path of existing rows, or for a group of its own.
    const seen = new Set<string>();
    const groups = new Map<string, NewResult[]>();
    for (const n of batch) {
      if (seen.has(n.report.jobId)) continue;
      seen.add(n.report.jobId);
      const key = `${n.report.defaultPoints} ${explicitTime(n.report) ?? ''}`;
      groups.set(key, [...(groups.get(key) ?? []), n]);
    }
    const points = new Map<NewResult, number | undefined | Error>();
    for (const group of groups.values()) {
      try {
        (await this.insert(group)).forEach((p, i) => points.set(group[i]!, p));
      } catch (err) {
        if (isUnavailable(err)) throw err;
        // One report the database refuses (a value it cannot take) must not fail the others:
        // alone, each gets its own answer.
        for (const n of group) {
          try {
            points.set(n, group.length === 1 ? toError(err) : (await this.insert([n]))[0]);
          } catch (e) {
            points.set(n, toError(e));
          }
        }
      }
    }
    return batch.map((n) => points.get(n));
  }
}
