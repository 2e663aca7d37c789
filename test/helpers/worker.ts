// `ins worker` in the test's process: the real Worker (src/worker/worker.ts) with the options
// the CLI would give it, its log lines and job outcomes collected, against a coordinator URL
// and a test backend (test/helpers/backends.ts). Faster to start than the CLI's process.
import { Worker, type JobOutcome } from '../../src/worker/worker.js';
import type { BackendKind, WorkerOptions } from '../../src/worker/options.js';
import type { Job } from '../../src/worker/coordinator-client.js';
import { until } from './wait.js';

// The waits, for the tests that import them from here.
export { sleep, until } from './wait.js';

export interface InProcessWorker {
  worker: Worker;
  /** Log lines as "level: message {fields}". */
  logs: string[];
  outcomes: { job: Job; outcome: JobOutcome }[];
  /** stop() and wait until it deregistered. */
  stop(): Promise<void>;
}

/** Starts a worker and resolves once it declared its models (it polls from then on). */
export async function startWorker(
  o: { server: string; node: string; key: string; backend: BackendKind; backendUrl: string } & Partial<WorkerOptions>,
): Promise<InProcessWorker> {
  const logs: string[] = [];
  const outcomes: InProcessWorker['outcomes'] = [];
  const worker = new Worker(
    { models: [], concurrency: 1, metricsPort: undefined, graceMs: 5_000, pollWait: 25, retryMaxMs: 30_000, continueAnswers: true, ...o },
    {
      log: (level, msg, fields) => logs.push(`${level}: ${msg}${fields ? ` ${JSON.stringify(fields)}` : ''}`),
      jobDone: (job, outcome) => outcomes.push({ job, outcome }),
    },
  );
  const running = worker.run();
  let failed: unknown;
  running.catch((err: unknown) => {
    failed = err;
  });
  await until(`${o.node} to declare its models`, () => {
    if (failed) throw failed as Error;
    return logs.some((l) => l.includes('models declared'));
  });
  return {
    worker,
    logs,
    outcomes,
    stop: async () => {
      worker.stop();
      await running;
    },
  };
}
