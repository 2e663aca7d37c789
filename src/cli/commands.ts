// The operator's commands that act on the database (everything but `serve` and `worker`),
// found by their one or two words, with their arguments checked before anything is touched.
import { parseArgs } from 'node:util';
import type { Database } from '../db/database.js';
import { DEFAULT_COORDINATOR } from '../config.js';
import { DEFAULT_VERIFY } from '../config-verify.js';
import { migrate, pendingMigrations, pendingSummary } from '../db/migrate.js';
import type { Command, RunOptions } from './command.js';
import { DATA_COMMANDS } from './data-commands.js';
import { NETWORK_COMMANDS } from './network-commands.js';
import { JOB_COMMANDS } from './job-commands.js';
import { VERIFY_COMMANDS } from './verify-commands.js';
import { LEDGER_COMMANDS } from './ledger-commands.js';
import { CommandError, isUsageError, reportFailure, UsageError, type Io } from './io.js';

export const COMMANDS: Record<string, Command> = { ...DATA_COMMANDS, ...NETWORK_COMMANDS, ...VERIFY_COMMANDS, ...JOB_COMMANDS, ...LEDGER_COMMANDS };

export interface ParsedCommand {
  name: string;
  command: Command;
  args: string[];
  opts: RunOptions;
  help: boolean;
}

/** Finds the command in argv (one or two words) and checks its arguments; throws UsageError. */
export function parseCommand(argv: string[]): ParsedCommand {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
      'skip-bad-rows': { type: 'boolean' },
      state: { type: 'string' },
      model: { type: 'string' },
      limit: { type: 'string' },
      days: { type: 'string' },
      jobs: { type: 'string' },
      tokens: { type: 'string' },
      'min-answers': { type: 'string' },
      apply: { type: 'boolean' },
    },
  });
  const two = positionals.slice(0, 2).join(' ');
  const name = COMMANDS[two] ? two : (positionals[0] ?? '');
  const help = values.help ?? false;
  const command = COMMANDS[name] ?? (help && positionals.length === 1 ? groupCommand(name) : undefined);
  if (!command) {
    if (!positionals.length) throw new UsageError('no command given');
    // `ins node`, `ins import bogus x.csv`: say what the group has rather than "unknown command".
    const group = groupCommand(positionals[0]!);
    if (group)
      throw new UsageError(
        `${positionals.length > 1 ? `unknown command "${positionals.slice(0, 2).join(' ')}"; ` : ''}${group.summary}\n(ins ${positionals[0]!} --help)`,
      );
    throw new UsageError(`unknown command "${positionals.join(' ')}"`);
  }
  const args = positionals.slice(name.split(' ').length);
  for (const flag of ['skip-bad-rows', 'state', 'model', 'limit', 'days', 'jobs', 'tokens', 'min-answers', 'apply'] as const) {
    if (values[flag] !== undefined && !command.flags?.includes(flag)) throw new UsageError(`"${name}" has no option --${flag}`);
  }
  if (!help && args.length !== command.args.length) {
    throw new UsageError(`"${name}" takes ${command.args.length ? command.args.join(' ') : 'no arguments'}; usage: ins ${command.usage}`);
  }
  const opts: RunOptions = {
    json: values.json ?? false,
    skipBadRows: values['skip-bad-rows'] ?? false,
    apply: values.apply ?? false,
    progress: false,
    filter: {
      state: values.state,
      model: values.model,
      limit: values.limit,
      days: values.days,
      jobs: values.jobs,
      tokens: values.tokens,
      minAnswers: values['min-answers'],
    },
    coordinator: DEFAULT_COORDINATOR,
    verify: DEFAULT_VERIFY,
  };
  return { name, command, args, opts, help };
}

/** The commands of a group (`node`, `key`, `import`…) as one pseudo-command, for `ins node --help` and the usage errors. */
function groupCommand(word: string): Command | undefined {
  const members = Object.entries(COMMANDS)
    .filter(([name]) => name.startsWith(`${word} `))
    .map(([, c]) => c);
  if (members.length === 0) return undefined;
  const list = members.map((c) => `  ins ${c.usage.padEnd(34)} ${c.summary}`).join('\n');
  return {
    usage: `${word} COMMAND`,
    summary: `"${word}" takes one of:\n${list}`,
    args: [],
    run: () => Promise.reject(new UsageError(`"${word}" needs a command`)),
  };
}

export const helpText = (c: Command): string => `usage: ins ${c.usage} [--json]\n\n${c.summary}`;

/** Runs a parsed command on an open database; returns the exit code. */
export async function runCommand(db: Database, argv: string[], io: Io, extra: Partial<RunOptions> = {}): Promise<number> {
  try {
    const p = parseCommand(argv);
    Object.assign(p.opts, extra);
    if (p.help) {
      io.out(helpText(p.command));
      return 0;
    }
    // Every command works on a fresh embedded data directory too (the user's own, made for them).
    // A PostgreSQL database is migrated only by `ins migrate` and `ins serve` (docs/cli.md): a
    // read-only command during an upgrade, or a mistyped DATABASE_URL, must not change a schema.
    if (p.name !== 'migrate') {
      if (db.kind === 'pglite') await migrate(db);
      else {
        const pending = await pendingMigrations(db);
        if (pending.length > 0) {
          throw new CommandError(
            `the database of DATABASE_URL is not migrated (${pendingSummary(pending)}): run \`ins migrate\` (or start \`ins serve\`, which migrates unless MIGRATE_ON_START=false)`,
          );
        }
      }
    }
    await p.command.run(db, p.args, p.opts, io);
    return 0;
  } catch (err) {
    const code = isUsageError(err) ? 2 : err instanceof CommandError ? 1 : undefined;
    if (code === undefined) throw err;
    reportFailure(io, argv, (err as Error).message);
    return code;
  }
}
