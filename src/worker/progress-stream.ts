// One job's progress over one request (POST /worker/job_progress_stream, issue 56): the body is
// NDJSON written as the text comes — the first line names the lease (job id, job key) and may
// carry text, each later line is {"delta": …} — and the answer is one line per line taken. A
// piece is written the moment the worker has it; pieces written while the socket is busy go
// together (the body's next chunk is whatever was queued when undici asks for it), and the
// coordinator keeps together the lines that arrive while it keeps one. Nothing is retried: the
// report carries the whole answer.
import { httpStream } from './http.js';

export interface StreamEvents {
  /** The coordinator said the lease has ended (canceled, expired, finished elsewhere). */
  ended: (detail: string) => void;
  /**
   * The stream cannot carry more: `unsupported` when the server has no such endpoint (an older
   * coordinator: 404), with `untaken` the text none of whose lines it took; else a failure after
   * which lines may have been taken or not.
   */
  failed: (unsupported: boolean, untaken: string) => void;
}

export class ProgressStream {
  /** When it was opened (performance.now()), to open a new one before the server's request timeout. */
  readonly opened = performance.now();
  private queued: string[] = [];
  private wake: (() => void) | undefined;
  private closing = false;
  private over = false;
  /** Lines written whose answer has not come. */
  unanswered = 0;
  /** The text of every line written, while the answer's headers have not come (to give back if the endpoint is missing). */
  private unconfirmed: string[] | undefined = [];
  private readonly done: Promise<void>;
  private readonly abort = new AbortController();

  constructor(
    url: string,
    jobId: string,
    jobKey: string,
    delta: string,
    private readonly events: StreamEvents,
  ) {
    this.queued.push(`${JSON.stringify({ job_id: jobId, api_key: jobKey, delta })}\n`);
    this.unconfirmed!.push(delta);
    this.unanswered = 1;
    this.done = this.run(url).catch((err: unknown) => this.fail(false, `${String(err)}`));
  }

  /** Writes a piece (or "" as a heartbeat) at once. */
  write(delta: string): void {
    if (this.closing || this.over) return;
    this.queued.push(`${JSON.stringify({ delta })}\n`);
    this.unconfirmed?.push(delta);
    this.unanswered++;
    this.wake?.();
  }

  /** Ends the body; resolves once the answer has ended (every line written taken or not), or after `timeoutMs`. */
  async close(timeoutMs: number): Promise<void> {
    this.closing = true;
    this.wake?.();
    const timer = setTimeout(() => this.abort.abort(), timeoutMs);
    await this.done;
    clearTimeout(timer);
  }

  private async *body(): AsyncGenerator<string> {
    for (;;) {
      if (this.queued.length > 0) {
        const chunk = this.queued.join('');
        this.queued = [];
        yield chunk;
        continue;
      }
      if (this.closing || this.over) return;
      await new Promise<void>((r) => (this.wake = r));
      this.wake = undefined;
    }
  }

  private async run(url: string): Promise<void> {
    const res = await httpStream(url, { headers: { 'content-type': 'application/x-ndjson' }, body: this.body(), signal: this.abort.signal });
    if (res.status !== 200) {
      const text = await res.text().catch(() => '');
      if (res.status === 400) {
        const detail = (() => {
          try {
            return String((JSON.parse(text) as { detail?: unknown }).detail);
          } catch {
            return text;
          }
        })();
        return this.end(() => this.events.ended(detail.slice(0, 300)));
      }
      // No such endpoint (an older coordinator): it took none of the lines.
      if (res.status === 404 || res.status === 405) return this.fail(true, (this.unconfirmed ?? []).join(''));
      return this.fail(false, `HTTP ${res.status}`);
    }
    this.unconfirmed = undefined;
    let rest = '';
    for await (const chunk of res.chunks()) {
      rest += chunk;
      for (let at = rest.indexOf('\n'); at >= 0; at = rest.indexOf('\n')) {
        const line = rest.slice(0, at);
        rest = rest.slice(at + 1);
        const answer = JSON.parse(line) as { status: string; detail?: string };
        if (answer.status === 'success') this.unanswered--;
        else if (answer.status === 'ended') return this.end(() => this.events.ended(String(answer.detail ?? 'the lease ended').slice(0, 300)));
        else return this.fail(false, String(answer.detail ?? answer.status));
      }
    }
    // The answer ended before the lines did: the server stopped (it closes), or the body was cut.
    if (this.unanswered > 0 || !this.closing) this.fail(false, 'the stream ended early');
    else this.over = true;
  }

  private end(tell: () => void): void {
    if (this.over) return;
    this.over = true;
    this.wake?.();
    tell();
  }

  private fail(unsupported: boolean, why: string): void {
    if (this.over) return;
    this.end(() => this.events.failed(unsupported, unsupported ? why : ''));
    this.abort.abort();
  }
}
