// A real HTTP proxy between a worker and the coordinator (the real app), for tests of the
// worker's side of the wire: it records what the worker sends (job_progress, update_result, the
// reports of jobs/next) and what it was answered, and can add fields to the `job_data` the worker
// gets (get_job's, and each of jobs/next's `jobs`) — as a coordinator does for a job whose answer
// an earlier attempt began (`answer_prefix`). A job's progress stream (POST
// /worker/job_progress_stream) passes line by line as it comes, each line recorded as a piece of
// progress with the status its answer line gives it (200 taken, 400 the lease ended, 422
// refused), as the pieces of job_progress are.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { PassThrough } from 'node:stream';
import { request } from 'undici';

export interface Tap {
  url: string;
  /** Fields added to each job_data handed to the worker (undefined: none). */
  jobData: ((job: Record<string, unknown>) => Record<string, unknown>) | undefined;
  progress: { job_id: string; delta: string; status: number }[];
  reports: { job_id: string; content: unknown; usage: unknown; status: number }[];
  close(): Promise<void>;
}

export async function startTap(target: string): Promise<Tap> {
  const tap: Tap = { url: '', jobData: undefined, progress: [], reports: [], close: async () => {} };
  const server: Server = createServer((req, res) => {
    if ((req.url ?? '').split('?')[0] === '/worker/job_progress_stream') return void passStream(target, tap, req, res).catch(() => res.destroy());
    const upstream = new AbortController();
    res.on('close', () => upstream.abort());
    void (async () => {
      let body = '';
      for await (const chunk of req) body += String(chunk);
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers))
        if (typeof v === 'string' && !['host', 'content-length', 'connection'].includes(k)) headers[k] = v;
      const r = await fetch(`${target}${req.url}`, {
        method: req.method,
        headers,
        body: req.method === 'GET' ? undefined : body,
        signal: upstream.signal,
      });
      let text = await r.text();
      const path = (req.url ?? '').split('?')[0];
      if (path === '/worker/get_job' && r.status === 200 && tap.jobData) {
        const answer = JSON.parse(text) as { job_data: Record<string, unknown> | null };
        if (answer.job_data) text = JSON.stringify({ job_data: { ...answer.job_data, ...tap.jobData(answer.job_data) } });
      }
      if (path === '/worker/job_progress') {
        const b = JSON.parse(body) as { job_id: string; delta: string };
        tap.progress.push({ job_id: b.job_id, delta: b.delta, status: r.status });
      }
      type Sent = { job_id: string; result: { message: { content?: unknown } | string }; usage?: unknown };
      const record = (b: Sent, status: number) =>
        tap.reports.push({
          job_id: b.job_id,
          content: typeof b.result.message === 'object' ? b.result.message.content : b.result.message,
          usage: b.usage,
          status,
        });
      if (path === '/worker/update_result') record(JSON.parse(body) as Sent, r.status);
      if (path === '/worker/jobs/next') {
        // Each report with the status update_result would have answered it alone (accepted: 200, refused: 400).
        const sent = (JSON.parse(body) as { reports?: Sent[] }).reports ?? [];
        const answer = r.status === 200 ? (JSON.parse(text) as { reports: { accepted: boolean }[]; jobs: Record<string, unknown>[] }) : undefined;
        sent.forEach((b, i) => record(b, answer ? (answer.reports[i]?.accepted ? 200 : 400) : r.status));
        const add = tap.jobData;
        if (answer && add) text = JSON.stringify({ ...answer, jobs: answer.jobs.map((j) => ({ ...j, ...add(j) })) });
      }
      res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' }).end(text);
    })().catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  tap.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  tap.close = () =>
    new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  return tap;
}

/** A progress stream, passed on as it comes, each line recorded with the status its answer gives it. */
async function passStream(target: string, tap: Tap, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const sent: { job_id: string; delta: string }[] = [];
  let jobId = '';
  let rest = '';
  const body = new PassThrough();
  req.on('data', (chunk: Buffer) => {
    rest += String(chunk);
    for (let at = rest.indexOf('\n'); at >= 0; at = rest.indexOf('\n')) {
      const line = JSON.parse(rest.slice(0, at)) as { job_id?: string; delta?: string };
      rest = rest.slice(at + 1);
      jobId ||= line.job_id ?? '';
      sent.push({ job_id: jobId, delta: line.delta ?? '' });
    }
    body.write(chunk);
  });
  req.on('end', () => body.end());
  const upstream = new AbortController();
  res.on('close', () => upstream.abort());
  const r = await request(`${target}${req.url}`, {
    method: 'POST',
    headers: { 'content-type': req.headers['content-type'] ?? 'application/x-ndjson' },
    body,
    signal: upstream.signal,
  });
  res.writeHead(r.statusCode, { 'content-type': String(r.headers['content-type'] ?? 'application/json') });
  if (r.statusCode !== 200) {
    const text = await r.body.text();
    if (sent[0]) tap.progress.push({ ...sent[0], status: r.statusCode });
    return void res.end(text);
  }
  let answers = '';
  let taken = 0;
  for await (const chunk of r.body) {
    answers += String(chunk);
    for (let at = answers.indexOf('\n'); at >= 0; at = answers.indexOf('\n')) {
      const { status } = JSON.parse(answers.slice(0, at)) as { status: string };
      answers = answers.slice(at + 1);
      const line = sent[taken++];
      if (line) tap.progress.push({ ...line, status: status === 'success' ? 200 : status === 'ended' ? 400 : 422 });
    }
    res.write(chunk);
  }
  res.end();
}
