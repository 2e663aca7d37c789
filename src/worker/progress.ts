// The line from a running job to the coordinator, for every job: the new text of a streamed
// job, and "" as a heartbeat whenever nothing was sent for HEARTBEAT_MS. Text goes as it comes:
// the first piece the moment the backend gives it, and after that gathered only while a send is
// in flight, so a fast backend's tokens share a send and a slow one's are never held back.
//
// A job's progress travels over one request for the job (POST /worker/job_progress_stream,
// progress-stream.ts; issue 56): a streamed job's is opened as the job starts, so that its first
// token goes on a request already open; another job's with its first heartbeat. Against an
// older coordinator (404), or once a stream failed, it goes piece by piece, one POST
// /worker/job_progress each. A stream is replaced by a new one after STREAM_MS, at a moment when
// the coordinator has answered all its lines (Node's request timeout bounds one request).
//
// The coordinator says once the lease has ended (the user canceled the job, the lease expired,
// the job finished elsewhere, its deadline passed): a 400, or the stream's "ended" line. That is
// how a cancel reaches the worker, within about a second. A network error or a 5xx is not a
// cancel: the job carries on and its report decides.
import { CoordinatorError, type CoordinatorClient, type Job } from './coordinator-client.js';
import type { ProgressStream } from './progress-stream.js';

export const HEARTBEAT_MS = 1_000;
// openapi.json, JobProgressRequest.delta: maxLength.
const MAX_DELTA = 65_536;
// A call that hangs must not hold up the job's report for long.
const CALL_TIMEOUT_MS = 10_000;
/** A stream's longest life: well within the coordinator's default request timeout (REQUEST_TIMEOUT_MS, 30 s). */
export const STREAM_MS = 10_000;

export class LeaseLink {
  /** The coordinator's detail, once it said the lease has ended. */
  ended: string | undefined;
  private pending = '';
  private timer: NodeJS.Timeout | undefined;
  private due = Infinity;
  private sending: Promise<void> | undefined;
  private lastSent = Date.now();
  private stopped = false;
  /** The job's open stream; undefined before the first send, and between two. */
  private stream: ProgressStream | undefined;
  /** False once a stream of this job failed: the rest goes piece by piece. */
  private streams: boolean;

  constructor(
    private readonly client: Pick<CoordinatorClient, 'progress' | 'progressStream' | 'streams'>,
    private readonly job: Job,
    private readonly onEnded: (detail: string) => void,
  ) {
    this.streams = client.streams;
  }

  /** From now on, a heartbeat at least every HEARTBEAT_MS; a streamed job's stream opens now, ready for its first token. */
  start(): void {
    this.lastSent = Date.now();
    if (this.job.stream && this.streams) this.stream = this.openStream('');
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
    await this.stream?.close(CALL_TIMEOUT_MS);
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
    if (this.streams) return this.sendOnStream();
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

  /** The pending text (or a heartbeat) as the stream's next lines, at once. */
  private sendOnStream(): void {
    this.lastSent = Date.now();
    const old = this.stream;
    if (old && old.unanswered === 0 && performance.now() - old.opened > STREAM_MS) {
      // Old enough, and all its lines answered: it closes, and the text goes on a new stream
      // once it has (in order), gathered meanwhile as while a call is in flight.
      this.stream = undefined;
      this.sending = old.close(CALL_TIMEOUT_MS).finally(() => {
        this.sending = undefined;
        this.schedule(this.pending ? 0 : HEARTBEAT_MS);
      });
      return;
    }
    do {
      let cut = Math.min(this.pending.length, MAX_DELTA);
      if (cut < this.pending.length && /[\uD800-\uDBFF]/.test(this.pending.charAt(cut - 1))) cut--;
      const delta = this.pending.slice(0, cut);
      this.pending = this.pending.slice(cut);
      if (this.stream) this.stream.write(delta);
      else this.stream = this.openStream(delta);
    } while (this.pending);
    this.schedule(HEARTBEAT_MS);
  }

  private openStream(delta: string): ProgressStream {
    const stream: ProgressStream = this.client.progressStream(this.job, delta, {
      ended: (detail) => {
        if (this.ended !== undefined) return;
        this.ended = detail;
        this.onEnded(detail);
      },
      failed: (unsupported, untaken) => {
        if (stream !== this.stream) return;
        this.stream = undefined;
        this.streams = false;
        // An older coordinator (no such endpoint) took none of it: the text goes piece by piece,
        // for this job and the next ones. After another failure, what the stream carried may be
        // lost: the report carries the whole answer.
        if (unsupported) {
          this.client.streams = false;
          this.pending = untaken + this.pending;
        }
        this.schedule(this.pending ? 0 : HEARTBEAT_MS);
      },
    });
    return stream;
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
