// What a worker shows: on a terminal, one live status line (state, jobs done, points today,
// the current job and its elapsed time); otherwise JSON log lines (pino). With --metrics-port,
// Prometheus metrics.
import { createServer, type Server } from 'node:http';
import pino from 'pino';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Worker, WorkerEvents } from './worker.js';

export interface Display extends WorkerEvents {
  start(worker: Worker, pointsToday: () => Promise<number>): void;
  stop(): void;
}

function elapsed(ms: number): string {
  const s = Math.floor(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
}

/** One line redrawn in place on a terminal; log lines go above it. */
export function terminalDisplay(out: NodeJS.WriteStream): Display {
  let worker: Worker | undefined;
  let points: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  let pointsTimer: NodeJS.Timeout | undefined;
  const line = () => {
    if (!worker) return '';
    const jobs = [...worker.current.values()].map((c) => `${c.job.model} ${c.job.job_id.slice(0, 8)} ${elapsed(Date.now() - c.since)}`);
    const canceled = worker.jobsCanceled ? ` · canceled: ${worker.jobsCanceled}` : '';
    return `[${worker.state}] jobs done: ${worker.jobsDone}${canceled} · points today: ${points ?? '…'}${jobs.length ? ` · now: ${jobs.join(', ')}` : ''}`;
  };
  const draw = () => out.write(`\r\x1b[2K${line()}`);
  const log: WorkerEvents['log'] = (level, msg) =>
    out.write(`\r\x1b[2K${new Date().toISOString().slice(11, 19)} ${level === 'info' ? '' : `${level}: `}${msg}\n${line()}`);
  return {
    log,
    jobDone: () => draw(),
    start(w, pointsToday) {
      worker = w;
      const refresh = () =>
        void pointsToday().then(
          (p) => {
            points = p;
          },
          () => undefined,
        );
      refresh();
      timer = setInterval(draw, 500);
      pointsTimer = setInterval(refresh, 30_000);
    },
    stop() {
      clearInterval(timer);
      clearInterval(pointsTimer);
      draw();
      out.write('\n');
    },
  };
}

export function logDisplay(level = process.env.LOG_LEVEL ?? 'info'): Display {
  const logger = pino({ level, base: { service: 'ins-worker' } });
  return {
    log: (lvl, msg, fields) => logger[lvl](fields ?? {}, msg),
    jobDone: (job, outcome, seconds, points) => logger.info({ job: job.job_id, model: job.model, outcome, seconds, points }, 'job'),
    start: () => {},
    stop: () => logger.flush(),
  };
}

/** Prometheus metrics of the worker on `port`; returns a close function. */
export async function serveMetrics(port: number, worker: Worker, display: Display): Promise<{ display: Display; close: () => Promise<void> }> {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const jobs = new Counter({
    name: 'ins_worker_jobs_total',
    help: 'Jobs run, by outcome (success, error, refused; canceled: the lease ended while it ran, so it was aborted and not reported)',
    labelNames: ['outcome'],
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'ins_worker_job_seconds',
    help: 'From a job taken to its report',
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 180],
    registers: [registry],
  });
  const points = new Counter({ name: 'ins_worker_points_total', help: "Points credited for this worker's reports", registers: [registry] });
  const overhead = new Histogram({
    name: 'ins_worker_overhead_seconds',
    help: "The worker's own time per job: from the job taken to its report sent, less the backend's time",
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.05],
    registers: [registry],
  });
  new Gauge({
    name: 'ins_worker_jobs_running',
    help: 'Jobs running now',
    registers: [registry],
    collect() {
      this.set(worker.current.size);
    },
  });
  const server: Server = createServer((req, res) => {
    if (req.url !== '/metrics') return void res.writeHead(404).end();
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      () => res.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, resolve));
  return {
    display: {
      ...display,
      jobDone: (job, outcome, seconds, p, own) => {
        jobs.inc({ outcome });
        duration.observe(seconds);
        // A canceled job was cut short: its time says nothing of the worker's own.
        if (outcome !== 'canceled') overhead.observe(own);
        if (p > 0) points.inc(p);
        display.jobDone(job, outcome, seconds, p, own);
      },
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
