// The built server with the dispatcher's measurement switches (docs/coordinator.md, Dispatch):
// `node --import tsx bench/serve-variant.ts handoff=off empty=off` serves like `ins serve`, configured from the
// environment, without the submit-time hand-off and/or without the dispatcher's memory of
// models with no queued job. Only `npm run bench -- --scenario dispatch --variants` uses it.
import { loadConfig } from '../src/config.js';
import { createLogger, startServer } from '../src/server.js';

const off = (name: string): boolean => process.argv.includes(`${name}=off`);
const config = { ...loadConfig(), migrateOnStart: true, dispatch: { handOff: !off('handoff'), trackEmpty: !off('empty') } };
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
