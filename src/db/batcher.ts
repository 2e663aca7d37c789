// Coalesces concurrent calls into fewer database round trips. Under load most of a request's
// cost is the round trip itself (the query's submission and the database's wake-up on a
// shared CPU), not the rows it touches, so N requests answered by one statement cost little
// more than one. A call never waits for a timer: it joins the next batch, which leaves as
// soon as fewer than `maxInFlight` batches are running — at once on an idle server, so a lone
// request pays nothing. Each batch is one statement, hence one transaction of its own: it
// commits or fails as a whole, and callers hear of its result only once it has.
export interface BatcherOptions {
  /** Most items in one statement. */
  maxBatch: number;
  /** Most statements running at once; the rest of the calls queue for the next batch. */
  maxInFlight: number;
}

interface Pending<I, O> { item: I; resolve: (o: O) => void; reject: (e: unknown) => void }

export class Batcher<I, O> {
  private queue: Pending<I, O>[] = [];
  private inFlight = 0;
  private scheduled = false;

  /** run answers items in order, one output per item; a throw fails only the batch's calls. */
  constructor(private readonly run: (items: I[]) => Promise<O[]>, private readonly opts: BatcherOptions) {}

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
      void this.send(batch).finally(() => {
        this.inFlight--;
        if (this.queue.length > 0 && !this.scheduled) this.flush();
      });
    }
  }

  private async send(batch: Pending<I, O>[]): Promise<void> {
    try {
      const out = await this.run(batch.map((p) => p.item));
      batch.forEach((p, i) => p.resolve(out[i]!));
    } catch (err) {
      for (const p of batch) p.reject(err);
    }
  }
}
