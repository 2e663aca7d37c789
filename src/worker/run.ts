// `ins worker`: runs the worker until SIGTERM or SIGINT, then lets it finish and deregister.
import { Worker } from './worker.js';
import { logDisplay, serveMetrics, terminalDisplay, type Display } from './status.js';
import type { WorkerOptions } from './options.js';
import { onStopSignals } from '../signals.js';

export async function runWorker(opts: WorkerOptions): Promise<number> {
  let display: Display = process.stderr.isTTY ? terminalDisplay(process.stderr) : logDisplay();
  // The worker needs its events at construction; they are forwarded to the display of the moment.
  const worker = new Worker(opts, { log: (...a) => display.log(...a), jobDone: (...a) => display.jobDone(...a) });
  let closeMetrics = async () => {};
  if (opts.metricsPort !== undefined) {
    try {
      const m = await serveMetrics(opts.metricsPort, worker, display);
      display = m.display;
      closeMetrics = m.close;
    } catch (err) {
      // One line, as for the worker's other start-up failures (EADDRINUSE: another worker's port).
      const code = (err as NodeJS.ErrnoException).code;
      display.log(
        'error',
        `--metrics-port ${opts.metricsPort}: ${code === 'EADDRINUSE' ? "the port is in use (another worker's? give each worker its own)" : (err as Error).message}`,
      );
      return 1;
    }
  }
  const unlisten = onStopSignals(() => worker.stop());
  display.start(worker, () => worker.client.pointsToday());
  try {
    await worker.run();
    return 0;
  } catch (err) {
    display.log('error', `the worker stopped: ${(err as Error).message}`);
    return 1;
  } finally {
    unlisten();
    display.stop();
    await closeMetrics();
  }
}
