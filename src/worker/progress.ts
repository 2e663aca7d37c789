// The line from a running job to the coordinator: POST /worker/job_progress with the job key,
// for every job — the new text of a streamed job, and "" as a heartbeat whenever nothing was
// sent for HEARTBEAT_MS. Text goes as it comes: the first piece the moment the backend gives
// it, and after that gathered only while a call is in flight, so a fast backend's tokens share
// a call and a slow one's are never held back (before, text waited 100 ms for company: the
// first token reached the application at least 100 ms after the backend sent it). The coordinator answers 400 once the
// lease has ended (the user canceled the job, the lease expired, the job finished elsewhere,
// its deadline passed): that is how a cancel reaches the worker, within about a second. A
// network error or a 5xx is not a cancel: the job carries on and its report decides.
import { CoordinatorError, type CoordinatorClient, type Job } from './coordinator-client.js';

export const HEARTBEAT_MS = 1_000;
// openapi.json, JobProgressRequest.delta: maxLength.
const MAX_DELTA = 65_536;
// A call that hangs must not hold up the job's report for long.
const CALL_TIMEOUT_MS = 10_000;

export class LeaseLink {
  /** The coordinator's detail, once it said the lease has ended. */
  ended: string | undefined;
  private pending = '';
  private timer: NodeJS.Timeout | undefined;
  private due = Infinity;
  private sending: Promise<void> | undefined;
  private lastSent = Date.now();
  private stopped = false;

  constructor(
    private readonly client: Pick<CoordinatorClient, 'progress'>,
    private readonly job: Job,
    private readonly onEnded: (detail: string) => void,
  ) {}

  /** From now on, a heartbeat at least every HEARTBEAT_MS. */
  start(): void {
    this.lastSent = Date.now();
    this.schedule(HEARTBEAT_MS);
  }

  /** New text of a streamed job: sent at once, or with the next call when one is in flight. */
  push(delta: string): void {
    if (!delta) return;
    this.pending += delta;
    this.schedule(0);
  }

  /**
   * No more calls; waits for the one in flight, so that no progress arrives after the report.
   * Text not yet sent is dropped: the report carries the whole answer.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.sending;
  }

  private schedule(ms: number): void {
    if (this.stopped || this.ended !== undefined || this.sending) return;
    if (ms === 0) {
      clearTimeout(this.timer);
      return this.send();
    }
    const due = Date.now() + ms;
    if (this.timer && this.due <= due) return;
    clearTimeout(this.timer);
    this.due = due;
    this.timer = setTimeout(() => this.send(), ms);
  }

  private send(): void {
    this.timer = undefined;
    this.due = Infinity;
    let cut = Math.min(this.pending.length, MAX_DELTA);
    // Never split a surrogate pair: each call's text must be UTF-8 on its own.
    if (cut < this.pending.length && /[\uD800-\uDBFF]/.test(this.pending.charAt(cut - 1))) cut--;
    const delta = this.pending.slice(0, cut);
    this.pending = this.pending.slice(cut);
    this.lastSent = Date.now();
    this.sending = this.client
      .progress(this.job, delta, AbortSignal.timeout(CALL_TIMEOUT_MS))
      .then(
        () => {},
        (err: unknown) => {
          if (err instanceof CoordinatorError && err.status === 400 && this.ended === undefined) {
            this.ended = err.detail;
            this.onEnded(err.detail);
          }
        },
      )
      .finally(() => {
        this.sending = undefined;
        this.schedule(this.pending ? 0 : Math.max(0, this.lastSent + HEARTBEAT_MS - Date.now()));
      });
  }
}

/**
 * For a job run from the start although an earlier attempt began its answer (the backend
 * cannot continue): relays only the text that follows `prefix`, and only while the new answer
 * began the same way; once it departs from the prefix nothing more is relayed (the report
 * decides what the client gets).
 */
export function afterPrefix(prefix: string, relay: (delta: string) => void): (delta: string) => void {
  let matched = 0;
  let departed = false;
  return (delta) => {
    if (departed) return;
    if (matched === prefix.length) return relay(delta);
    const n = Math.min(delta.length, prefix.length - matched);
    if (delta.slice(0, n) !== prefix.slice(matched, matched + n)) {
      departed = true;
      return;
    }
    matched += n;
    if (n < delta.length) relay(delta.slice(n));
  };
}
