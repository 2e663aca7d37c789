// POST /worker/job_progress_stream (ours): a job's progress over one request for the job, rather
// than one POST /worker/job_progress per piece (issue 56). The body is NDJSON, written by the
// worker as the text comes: its first line is a JobProgressRequest (job_id, the job key, a first
// delta, "" for none), each later line a JobProgressStreamLine ({"delta": …}; "" a heartbeat).
// The answer is NDJSON too, one line per line taken, in order: {"status":"success"}; or, once
// the lease is not open (canceled, expired, finished elsewhere), {"status":"ended","detail":…}
// and the end of the answer — as job_progress's 400 tells it, so that the worker stops; or
// {"status":"error","detail":…} for a line that is not a JobProgressStreamLine (nothing of it is
// kept), and the end. A first line that is refused is refused as job_progress refuses its body
// (422, 400), before any answer is sent, and nothing is kept.
//
// The lines are taken in order, one statement at a time (jobs/progress.ts): lines that arrive
// while one is kept are kept together, with one statement — a worker writes each piece the
// moment it has it, and the gathering happens here, only while a statement is in flight.
import { PassThrough, type Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { JobProgressRequest, JobProgressStreamLine } from '../../generated/schemas.js';
import { hashKey } from '../../keys.js';
import { HttpError } from '../../http/http-error.js';
import { RequestValidationError } from '../../http/validator.js';
import { MalformedJson, storableText, validatePart } from '../../validation/pydantic.js';
import { parseJsonBody } from '../../http/content.js';
import type { App, Deps } from '../types.js';

export const STREAM_PATH = '/worker/job_progress_stream';
/** The longest line taken: a delta of 65,536 characters, each escaped as \uXXXX, and its keys. */
const MAX_LINE_BYTES = 65_536 * 6 + 1_024;
/** Lines read ahead of the one being kept, before the request is paused. */
const MAX_QUEUED = 256;

export const endedDetail = (jobId: string): string =>
  `No open lease of job ${jobId} for this job key: it was canceled, expired or finished; stop working on it`;

/** The request body's lines as they arrive: `next()` resolves with every complete line read since the last call ([] at the end). */
class Lines {
  private queued: string[] = [];
  private rest = '';
  private restBytes = 0;
  private ended = false;
  private failed: string | undefined;
  private wake: (() => void) | undefined;
  private readonly decoder = new StringDecoder('utf8');

  constructor(private readonly body: Readable) {
    body.on('data', (chunk: Buffer) => this.take(chunk));
    body.on('end', () => this.finish());
    body.on('error', () => this.finish());
    body.on('close', () => this.finish());
  }

  private take(chunk: Buffer): void {
    const text = this.decoder.write(chunk);
    let from = 0;
    for (let at = text.indexOf('\n'); at >= 0; at = text.indexOf('\n', from)) {
      const line = this.rest + text.slice(from, at);
      this.rest = '';
      this.restBytes = 0;
      from = at + 1;
      if (line.trim() !== '') this.queued.push(line);
    }
    this.rest += text.slice(from);
    this.restBytes += chunk.length;
    if (this.restBytes > MAX_LINE_BYTES && this.rest.length > 0) {
      this.failed = `a line is longer than ${MAX_LINE_BYTES} bytes`;
      this.body.pause();
    }
    if (this.queued.length >= MAX_QUEUED) this.body.pause();
    this.wake?.();
  }

  private finish(): void {
    if (this.ended) return;
    this.ended = true;
    const last = this.rest + this.decoder.end();
    this.rest = '';
    if (last.trim() !== '') this.queued.push(last);
    this.wake?.();
  }

  /** The lines read since the last call; [] once the body has ended and all were taken. A line too long ends the lines with `tooLong`. */
  async next(): Promise<{ lines: string[]; tooLong?: string }> {
    while (this.queued.length === 0 && !this.ended && this.failed === undefined) await new Promise<void>((r) => (this.wake = r));
    this.wake = undefined;
    const lines = this.queued;
    this.queued = [];
    if (this.body.isPaused() && this.failed === undefined) this.body.resume();
    return this.failed !== undefined && lines.length === 0 ? { lines, tooLong: this.failed } : { lines };
  }

  /** Stops reading: what the worker still sends is dropped. */
  stop(): void {
    this.ended = true;
    this.body.resume();
    this.wake?.();
  }
}

/** A line as JSON, or the validation error a body like it would get. */
function parseLine(line: string): unknown {
  try {
    return parseJsonBody(line);
  } catch {
    return new MalformedJson({ pos: 0, msg: 'Expecting value' });
  }
}

/** The text of a line as the service keeps it: a pair split at the line's end is held for the next (job-progress.ts SplitPairs). */
function joinPairs(held: string, delta: string): { text: string; held: string } {
  const text = held + delta;
  const last = text.charCodeAt(text.length - 1);
  return last >= 0xd800 && last <= 0xdbff ? { text: text.slice(0, -1), held: text.slice(-1) } : { text, held: '' };
}

export function jobProgressStreamRoute(app: App, { service }: Deps): void {
  const { coordinator } = service;
  const open = new Set<() => void>();
  // A stopping server ends its streams: their workers send what follows with job_progress, or on a new stream elsewhere.
  app.addHook('preClose', (done) => {
    for (const end of open) end();
    done();
  });
  app.register((scope, _opts, registered) => {
    // The body is read line by line as it arrives, not parsed whole (http/content.ts).
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, payload, done) => done(null, payload));
    scope.post(STREAM_PATH, async (req, reply) => {
      const lines = new Lines(req.body as Readable);
      const first = await lines.next();
      const [head, ...more] = first.lines;
      if (first.tooLong) throw new HttpError(413, `The first line is too large: ${first.tooLong}`);
      if (head === undefined) throw new RequestValidationError(errorsOf(undefined));
      const parsed = parseLine(head);
      // The first line may leave its delta out: the stream opens with no text.
      if (parsed !== null && typeof parsed === 'object' && !(parsed instanceof MalformedJson) && !('delta' in parsed))
        (parsed as Record<string, unknown>).delta = '';
      const checked = validatePart(JobProgressRequest, 'body', parsed);
      if (!checked.ok) throw new RequestValidationError(checked.errors);
      const { job_id: jobId, api_key: apiKey, delta } = checked.value as { job_id: string; api_key: string; delta: string };
      const keyHash = hashKey(apiKey);
      let pairs = joinPairs('', storableText(delta));
      if (!(await coordinator.publishProgress(keyHash, jobId, pairs.text))) throw new HttpError(400, endedDetail(jobId));

      const out = new PassThrough();
      const answer = (line: object) => out.write(`${JSON.stringify(line)}\n`);
      let over = false;
      const end = () => {
        if (over) return;
        over = true;
        lines.stop();
        open.delete(end);
        out.end();
      };
      open.add(end);
      req.raw.on('close', () => {
        if (!req.raw.complete) end();
      });
      answer({ status: 'success' });
      void (async () => {
        let pending = more;
        for (;;) {
          if (pending.length === 0) {
            const r = await lines.next();
            if (over) return;
            if (r.tooLong) return (answer({ status: 'error', detail: r.tooLong }), end());
            if (r.lines.length === 0) return end();
            pending = r.lines;
          }
          // The lines read so far, kept with one statement; a bad one ends the stream after those before it.
          let text = '';
          let taken = 0;
          let refused: string | undefined;
          for (const line of pending) {
            const v = validatePart(JobProgressStreamLine, 'body', parseLine(line));
            if (!v.ok) {
              refused = JSON.stringify(v.errors.map(({ loc, msg, type }) => ({ loc, msg, type })));
              break;
            }
            pairs = joinPairs(pairs.held, storableText((v.value as { delta: string }).delta));
            text += pairs.text;
            taken++;
          }
          pending = [];
          if (taken > 0) {
            if (!(await coordinator.publishProgress(keyHash, jobId, text))) return (answer({ status: 'ended', detail: endedDetail(jobId) }), end());
            for (let i = 0; i < taken; i++) answer({ status: 'success' });
          }
          if (refused !== undefined) return (answer({ status: 'error', detail: refused }), end());
        }
      })().catch((err: unknown) => {
        // The database failed: the worker's later text reaches the client with the report.
        req.log.warn({ err }, 'job_progress_stream: a line could not be kept; the stream ends');
        answer({ status: 'error', detail: 'The service could not keep this progress; send the rest with job_progress or the report' });
        end();
      });
      return reply.type('application/x-ndjson').send(out);
    });
    registered();
  });
}

/** FastAPI's errors for a missing body. */
function errorsOf(data: undefined) {
  const r = validatePart(JobProgressRequest, 'body', data);
  return r.ok ? [] : r.errors;
}
