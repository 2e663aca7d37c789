// Jobs done per model lately, as every server hears them (the lifecycle's outcomes, here and
// announced by the others): the pace an estimate of a queued job's wait is made from, without a
// statement. Counted in ten-second buckets over the last five minutes (or since this server
// started, when that is shorter).
import type { Outcome } from './outcome.js';
import type { LiveConsumer } from './lifecycle.js';

const BUCKET_MS = 10_000;
const BUCKETS = 30;

export class Throughput implements LiveConsumer {
  private readonly models = new Map<number, { counts: number[]; bucket: number }>();
  private readonly startedAt: number;

  constructor(private readonly now: () => number = Date.now) {
    this.startedAt = now();
  }

  apply(o: Outcome): void {
    for (const f of o.finished.values()) if (f.state === 'done') this.count(f.model);
  }

  /** Jobs of the model done per second lately; 0 when none. */
  perSecond(model: number): number {
    const m = this.models.get(model);
    if (!m) return 0;
    this.advance(m);
    const total = m.counts.reduce((a, b) => a + b, 0);
    const window = Math.min(BUCKETS * BUCKET_MS, Math.max(BUCKET_MS, this.now() - this.startedAt));
    return total / (window / 1000);
  }

  /** Seconds until a job with `ahead` jobs before it is likely to be taken; null when the model has no pace yet. */
  eta(model: number, ahead: number): number | null {
    const rate = this.perSecond(model);
    return rate > 0 ? Math.ceil((ahead + 1) / rate) : null;
  }

  private count(model: number): void {
    let m = this.models.get(model);
    if (!m) this.models.set(model, (m = { counts: new Array<number>(BUCKETS).fill(0), bucket: Math.floor(this.now() / BUCKET_MS) }));
    this.advance(m);
    m.counts[m.bucket % BUCKETS]!++;
  }

  /** Clears the buckets the clock has moved past. */
  private advance(m: { counts: number[]; bucket: number }): void {
    const current = Math.floor(this.now() / BUCKET_MS);
    for (let b = m.bucket + 1; b <= current && b <= m.bucket + BUCKETS; b++) m.counts[b % BUCKETS] = 0;
    m.bucket = Math.max(m.bucket, current);
  }
}
