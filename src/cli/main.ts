// `ins`: the operator's command line. `serve` runs the service; the other commands manage
// nodes, keys and models on the configured database (see commands.ts). Exit codes: 0 done,
// 1 failed (bad configuration, no such node, database unreachable...), 2 bad arguments.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ADVANCED_CONFIG_DOC, ConfigError, CONFIG_DOC, loadConfig, type Config } from '../config.js';
import { DataDirBusyError, StartAborted } from '../db/data-dir-lock.js';
import { isBrief } from './brief.js';
import { adminSocketPath, forwardToServer, type Forwarded } from './forward.js';
import { consoleIo, isUsageError, reportFailure } from './io.js';
import { startFailure } from './start-failure.js';
import { onStopSignals } from '../signals.js';

// Everything heavier than the above (the commands, the database drivers, the server) is
// imported where it is needed: a command forwarded to a running server loads none of it.

const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

async function usage(): Promise<string> {
  const { COMMANDS } = await import('./commands.js');
  const lines = [
    'usage: ins <command> [arguments] [--json] [--help]',
    '',
    'commands:',
    `  ${'serve [--no-migrate]'.padEnd(32)}run the HTTP service (applies migrations first unless --no-migrate)`,
    `  ${'worker --server URL --node NAME …'.padEnd(32)}run this machine as a node: jobs from the coordinator, run on Ollama or an OpenAI-compatible server (ins worker --help)`,
    ...Object.values(COMMANDS).map((c) => `  ${c.usage.padEnd(31)} ${c.summary}`),
    '',
    '--json prints machine-readable output. Keys are printed once, on stdout; notes go to stderr.',
    '',
    'environment:',
    ...CONFIG_DOC.map(([name, def, what]) => `  ${name.padEnd(24)}${what} (default ${def})`),
    '',
    `advanced (thresholds and timeouts, docs/operations.md): ${ADVANCED_CONFIG_DOC.map(([name]) => name).join(', ')}`,
  ];
  return lines.join('\n');
}

async function serve(config: Config, argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { 'no-migrate': { type: 'boolean' }, help: { type: 'boolean', short: 'h' } } });
  if (values.help) {
    console.log(
      'usage: ins serve [--no-migrate]\n\nRuns the HTTP service on PORT (default 8000). Configuration comes from the environment (ins --help).',
    );
    return 0;
  }
  // A signal while the server starts (loading, opening the database, migrating) is not lost, nor
  // does it kill the process half-way: the start completes, then the server stops as for any
  // SIGTERM (exit 0).
  let early: string | undefined;
  // It also ends a wait for an `ins` command to free the embedded database (db/open.ts).
  const starting = new AbortController();
  const earlyTerm = () => {
    early ??= 'SIGTERM';
    starting.abort();
  };
  const earlyInt = () => {
    early ??= 'SIGINT';
    starting.abort();
  };
  process.on('SIGTERM', earlyTerm);
  process.on('SIGINT', earlyInt);
  // Loaded on demand: `--help` and argument errors should answer without loading the server.
  const { createLogger, flushLog, startServer } = await import('../server.js');
  const logger = createLogger(config.logLevel);
  logger.info({ database: config.databaseUrl ? 'PostgreSQL (DATABASE_URL)' : `embedded PGlite at ${config.dataDir}` }, 'starting');
  for (const warning of config.warnings ?? []) logger.warn(warning);
  let server;
  try {
    server = await startServer({ ...config, migrateOnStart: config.migrateOnStart && !values['no-migrate'] }, logger, {
      signal: starting.signal,
      // The embedded database is this process's alone: other `ins` commands are forwarded here,
      // from before the port listens, so a command run once /healthz answers finds the socket.
      beforeListen: async ({ db, jobs }) => {
        if (db.kind !== 'pglite') return undefined;
        const { serveAdminSocket } = await import('./admin-socket.js');
        return serveAdminSocket(db, config, jobs, (err) => logger.error({ err }, 'admin command failed'));
      },
    });
  } catch (err) {
    if (err instanceof StartAborted) {
      logger.info({ signal: early }, `${err.message}; nothing was started`);
      return 0;
    }
    if (err instanceof DataDirBusyError) {
      logger.fatal(`${err.message}: is the server already running? Stop it first, or use another DATA_DIR.`);
    } else if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') {
      logger.fatal(`port ${config.port} is already in use: stop the other process or set PORT`);
    } else {
      const reason = startFailure(err, config);
      if (reason) logger.fatal({ code: (err as NodeJS.ErrnoException).code }, `could not start: ${reason}`);
      else logger.fatal({ err }, 'could not start');
    }
    return 1;
  } finally {
    process.off('SIGTERM', earlyTerm);
    process.off('SIGINT', earlyInt);
  }
  const running = server;
  return new Promise<number>((resolve) => {
    const stop = (signal: string) => {
      logger.info({ signal }, 'shutting down: no new connections, finishing in-flight requests');
      running
        .close()
        .then(
          () => {
            logger.info('stopped');
            return 0;
          },
          (err: unknown) => {
            logger.error({ err }, 'error while stopping');
            return 1;
          },
        )
        .then(
          async (code) => {
            await flushLog(logger);
            resolve(code);
          },
          () => resolve(1),
        );
    };
    if (early) {
      logger.info({ signal: early }, 'the signal came while starting');
      return stop(early);
    }
    onStopSignals(stop);
  });
}

async function worker(argv: string[]): Promise<number> {
  const { parseWorkerOptions, WORKER_HELP, WorkerUsageError } = await import('../worker/options.js');
  let opts;
  try {
    opts = parseWorkerOptions(argv, process.env);
  } catch (err) {
    if (err instanceof WorkerUsageError || (err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS')) {
      consoleIo.err(`ins worker: ${(err as Error).message.split('\n').join('\nins worker: ')}\n(see: ins worker --help)`);
      return 2;
    }
    throw err;
  }
  if (opts === 'help') {
    console.log(WORKER_HELP);
    return 0;
  }
  const { runWorker } = await import('../worker/run.js');
  return runWorker(opts);
}

function print(forwarded: Forwarded): number {
  forwarded.stdout.forEach((l) => consoleIo.out(l));
  forwarded.stderr.forEach((l) => consoleIo.err(l));
  return forwarded.code;
}

async function admin(config: Config, argv: string[]): Promise<number> {
  // A server holding the embedded database answers on its admin socket: it checks the
  // arguments (a bad call touches nothing there either) and runs the command.
  if (!config.databaseUrl) {
    const forwarded = await forwardToServer(config.dataDir, argv);
    if (forwarded) return print(forwarded);
  }
  const { helpText, parseCommand, runCommand } = await import('./commands.js');
  // Arguments are checked before the database is opened: a bad call touches nothing.
  try {
    const parsed = parseCommand(argv);
    if (parsed.help) {
      consoleIo.out(helpText(parsed.command));
      return 0;
    }
  } catch (err) {
    if (isUsageError(err)) {
      reportFailure(consoleIo, argv, (err as Error).message);
      return 2;
    }
    throw err;
  }
  const { openDatabase } = await import('../db/open.js');
  // A command run from another directory than the server's finds no ./data there: it makes a
  // new, empty embedded database, which is said (on stderr), rather than silently writing where
  // no server reads.
  const fresh = !config.databaseUrl && !existsSync(path.join(config.dataDir, 'PG_VERSION'));
  let db;
  try {
    db = await openDatabase(config, `ins ${argv.join(' ')}`, { brief: isBrief(argv) });
    if (fresh)
      consoleIo.err(
        `ins: made a new embedded database in ${path.resolve(config.dataDir)} (DATA_DIR; a server elsewhere uses its own: run ins where it runs, or set DATA_DIR)`,
      );
  } catch (err) {
    if (!(err instanceof DataDirBusyError)) {
      // The database out of reach, DATA_DIR unusable: the sentence `ins serve` logs, naming the setting.
      const reason = startFailure(err, config);
      if (!reason) throw err;
      reportFailure(consoleIo, argv, reason);
      return 1;
    }
    if (err.purpose !== 'server') {
      reportFailure(consoleIo, argv, `${err.message}. Wait for it to finish, or stop it, then run this command again.`);
      return 1;
    }
    // The server may have opened its socket since we looked.
    const forwarded = await forwardToServer(config.dataDir, argv);
    if (forwarded) return print(forwarded);
    reportFailure(
      consoleIo,
      argv,
      `${err.message}, but it does not answer on ${adminSocketPath(config.dataDir)} yet: it is starting or stopping. ` +
        'Run this command again once its /healthz answers "ok" (commands are then sent to it), or stop it to run the command here.',
    );
    return 1;
  }
  try {
    return await runCommand(db, argv, consoleIo, {
      progress: process.stderr.isTTY === true,
      coordinator: config.coordinator,
      verify: config.verify,
      ledgerKeyFile: config.ledgerKeyFile,
    });
  } catch (err) {
    // PostgreSQL is first reached by the command's first statement (the pool connects then).
    const reason = startFailure(err, config);
    if (!reason) throw err;
    reportFailure(consoleIo, argv, reason);
    return 1;
  } finally {
    await db.close().catch(() => undefined);
  }
}

export async function main(argv: string[]): Promise<number> {
  const [first, ...rest] = argv;
  if (first === undefined || first === '--help' || first === '-h' || first === 'help') {
    console.log(await usage());
    return first === undefined ? 2 : 0;
  }
  if (first === '--version' || first === '-v') {
    console.log(VERSION);
    return 0;
  }
  // The worker runs beside a backend, not beside the database: it needs none of the server's configuration.
  if (first === 'worker') return worker(rest);
  // So does the ledger's check over HTTP: a node operator's machine has only the URL.
  if (first === 'ledger' && rest[0] === 'verify' && rest.some((a) => a === '--server' || a.startsWith('--server='))) {
    const { runLedgerVerify } = await import('../ledger-client/cli.js');
    return runLedgerVerify(
      rest.slice(1),
      (l) => consoleIo.out(l),
      (l) => consoleIo.err(l),
    );
  }
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`ins: ${err.message}`);
      return 1;
    }
    throw err;
  }
  if (first !== 'serve') for (const warning of config.warnings ?? []) console.error(`ins: ${warning}`);
  try {
    return first === 'serve' ? await serve(config, rest) : await admin(config, argv);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' || code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') {
      console.error(`ins: ${(err as Error).message}`);
      return 2;
    }
    console.error(`ins: ${(err as Error).message}`);
    return 1;
  }
}
