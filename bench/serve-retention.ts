// The built server with retention's window and pace set from the environment, below what
// JOB_RETENTION accepts (an hour): `BENCH_RETENTION_SECONDS=20 BENCH_RETENTION_EVERY=2 node --import tsx
// bench/serve-retention.ts` serves like `ins serve`. Only `npm run bench -- --scenario retention` uses it.
import { loadConfig } from '../src/config.js';
import { createLogger, startServer } from '../src/server.js';

const config = {
  ...loadConfig(),
  migrateOnStart: true,
  jobRetention: Number(process.env.BENCH_RETENTION_SECONDS ?? 20),
  retentionEvery: Number(process.env.BENCH_RETENTION_EVERY ?? 2),
};
const logger = createLogger(config.logLevel);
const server = await startServer(config, logger);
const stop = () => {
  server.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
