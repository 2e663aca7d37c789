// Coalesces concurrent calls into fewer database round trips. Under load most of a request's
// cost is the round trip itself (the query's submission and the database's wake-up on a
// shared CPU), not the rows it touches, so N requests answered by one statement cost little
// more than one. A call never waits for a timer: it joins the next batch, which leaves as
// soon as fewer than `maxInFlight` batches are running — at once on an idle server, so a lone
// request pays nothing. Each batch is one statement, hence one transaction of its own: it
// commits or fails as a whole, and callers hear of its result only once it has.
//
// A batch fails as a whole, so one item the database refuses (a value it cannot store, a
// constraint) would fail every caller that happened to share its statement: with `alone`, the
// items of a failed batch are run again one by one, and each caller gets its own answer. A
// database outage is not retried that way (every item would fail alike, each after a wait).
import { isUnavailable } from './errors.js';

export interface BatcherOptions {
  /** Most items in one statement. */
  maxBatch: number;
  /** Most statements running at once; the rest of the calls queue for the next batch. */
  maxInFlight: number;
  /**
   * When `run` throws for a batch of several items (anything but a database outage), run each
   * item alone and answer each caller with its own result or error. `run` must then commit
   * nothing when it throws (one statement, or one transaction).
   */
  alone?: boolean;
}

interface Pending<I, O> {
  item: I;
  resolve: (o: O) => void;
  reject: (e: unknown) => void;
}

export class Batcher<I, O> {
  private queue: Pending<I, O>[] = [];
  private inFlight = 0;
  private scheduled = false;

  /** run answers items in order, one output per item; a throw fails only the batch's calls. */
  constructor(
    private readonly run: (items: I[]) => Promise<O[]>,
    private readonly opts: BatcherOptions,
  ) {}

  load(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      // Requests parsed in the same turn of the event loop leave together.
      if (!this.scheduled && this.inFlight < this.opts.maxInFlight) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.scheduled = false;
    while (this.queue.length > 0 && this.inFlight < this.opts.maxInFlight) {
      const batch = this.queue.splice(0, this.opts.maxBatch);
      this.inFlight++;
      // send() settles every caller of the batch itself and never rejects.
      this.send(batch)
        .finally(() => {
          this.inFlight--;
          if (this.queue.length > 0 && !this.scheduled) this.flush();
        })
        .catch(() => undefined);
    }
  }

  private async send(batch: Pending<I, O>[]): Promise<void> {
    try {
      const out = await this.run(batch.map((p) => p.item));
      batch.forEach((p, i) => p.resolve(out[i]!));
    } catch (err) {
      if (!this.opts.alone || batch.length === 1 || isUnavailable(err)) {
        for (const p of batch) p.reject(err);
        return;
      }
      // One after the other, inside this batch's slot: the fallback adds no load beyond it.
      for (const p of batch) {
        try {
          p.resolve((await this.run([p.item]))[0]!);
        } catch (e) {
          p.reject(e);
        }
      }
    }
  }
}
