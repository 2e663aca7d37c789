// The operator's commands that act on the database (everything but `serve`). Each validates
// its arguments before touching anything, so a bad call changes nothing.
import { parseArgs } from 'node:util';
import type { Database } from '../db/database.js';
import { migrate } from '../db/migrate.js';
import { createNode, listNodes, NodeExistsError, rotateNodeKey, setNodeDisabled } from '../repositories/nodes.js';
import { addReaderKey, listReaderKeys, revokeReaderKey } from '../repositories/reader-keys.js';
import { listModels, setModelPoints } from '../repositories/models.js';
import { CommandError, table, UsageError, type Io } from './io.js';

interface Command {
  usage: string;
  summary: string;
  args: string[];
  run(db: Database, args: string[], json: boolean, io: Io): Promise<void>;
}

function checkName(what: string, value: string, max: number): void {
  const length = [...value].length;
  if (length < 1 || length > max) throw new UsageError(`${what} must be 1 to ${max} characters (got ${length})`);
}

function setDisabledCommand(disabled: boolean): Command {
  const verb = disabled ? 'disable' : 'enable';
  return {
    usage: `node ${verb} NAME`,
    summary: disabled ? 'disable a node: its key gets 403 from now on' : 'enable a disabled node again',
    args: ['NAME'],
    async run(db, [name], json, io) {
      if (!(await setNodeDisabled(db, name!, disabled))) throw new CommandError(`no node named "${name}"`);
      io.out(json ? JSON.stringify({ name, disabled }) : `node "${name}" ${verb}d`);
    },
  };
}

const KEY_NOTE = 'Store this key now: it is shown only once and only its hash is kept.';

export const COMMANDS: Record<string, Command> = {
  migrate: {
    usage: 'migrate',
    summary: 'apply pending database migrations',
    args: [],
    async run(db, _args, json, io) {
      const applied = await migrate(db);
      if (json) io.out(JSON.stringify({ applied }));
      else io.out(applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
    },
  },
  'node add': {
    usage: 'node add NAME',
    summary: "create a node and print its key (nk_…) once",
    args: ['NAME'],
    async run(db, [name], json, io) {
      checkName('NAME', name!, 128);
      try {
        const { key } = await createNode(db, name!);
        if (json) io.out(JSON.stringify({ name, key }));
        else io.out(key);
        io.err(`Node "${name}" created. ${KEY_NOTE}`);
      } catch (err) {
        if (err instanceof NodeExistsError) throw new CommandError(`${err.message}; use "ins node rotate-key ${name}" for a new key`);
        throw err;
      }
    },
  },
  'node list': {
    usage: 'node list',
    summary: 'list nodes with their status and points',
    args: [],
    async run(db, _args, json, io) {
      const nodes = await listNodes(db);
      if (json) return io.out(JSON.stringify(nodes));
      if (nodes.length === 0) return io.out('no nodes yet; create one with: npx ins node add NAME');
      for (const line of table([['NAME', 'STATUS', 'TOTAL_POINTS', 'LAST_DAY_WITH_POINTS', 'CREATED'],
        ...nodes.map((n) => [n.name, n.disabled ? 'disabled' : 'active', String(n.total_points), n.last_day_with_points ?? '-', n.created_at])])) io.out(line);
    },
  },
  'node disable': setDisabledCommand(true),
  'node enable': setDisabledCommand(false),
  'node rotate-key': {
    usage: 'node rotate-key NAME',
    summary: 'give a node a new key; the old one stops working at once',
    args: ['NAME'],
    async run(db, [name], json, io) {
      const key = await rotateNodeKey(db, name!);
      if (!key) throw new CommandError(`no node named "${name}"`);
      io.out(json ? JSON.stringify({ name, key }) : key);
      io.err(`New key for node "${name}"; the old key no longer works. ${KEY_NOTE}`);
    },
  },
  'key add-reader': {
    usage: 'key add-reader LABEL',
    summary: "create a reader key (rk_…) for dashboards and print it once",
    args: ['LABEL'],
    async run(db, [label], json, io) {
      checkName('LABEL', label!, 128);
      const { id, key } = await addReaderKey(db, label!);
      io.out(json ? JSON.stringify({ id, label, key }) : key);
      io.err(`Reader key ${id} ("${label}") created. ${KEY_NOTE}`);
    },
  },
  'key list': {
    usage: 'key list',
    summary: 'list reader keys (ids and labels, never the keys)',
    args: [],
    async run(db, _args, json, io) {
      const keys = await listReaderKeys(db);
      if (json) return io.out(JSON.stringify(keys));
      if (keys.length === 0) return io.out('no reader keys; create one with: npx ins key add-reader LABEL');
      for (const line of table([['ID', 'LABEL', 'STATUS', 'CREATED'], ...keys.map((k) => [String(k.id), k.label, k.revoked ? 'revoked' : 'active', k.created_at])])) io.out(line);
    },
  },
  'key revoke': {
    usage: 'key revoke ID|LABEL',
    summary: 'revoke a reader key by id or by its (unique) label',
    args: ['ID|LABEL'],
    async run(db, [which], json, io) {
      const r = await revokeReaderKey(db, which!);
      if ('error' in r) throw new CommandError(r.error);
      io.out(json ? JSON.stringify({ id: r.id, revoked: true }) : `reader key ${r.id} revoked`);
    },
  },
  'model set-points': {
    usage: 'model set-points MODEL POINTS',
    summary: 'points a success of MODEL earns (a number >= 0, or "default")',
    args: ['MODEL', 'POINTS'],
    async run(db, [model, raw], json, io) {
      checkName('MODEL', model!, 256);
      const points = raw === 'default' ? null : Number(raw);
      if (points !== null && (!/^\d+(\.\d+)?$/.test(raw!) || !Number.isFinite(points) || points > 1e9)) {
        throw new UsageError(`POINTS must be a number >= 0 (e.g. 1 or 2.5) or "default", got "${raw}"`);
      }
      await setModelPoints(db, model!, points);
      io.out(json ? JSON.stringify({ model, points_per_job: points }) : `model "${model}": ${points === null ? 'default points' : `${points} points per job`}`);
    },
  },
  'model list': {
    usage: 'model list',
    summary: 'list models with their points per job and number of nodes',
    args: [],
    async run(db, _args, json, io) {
      const models = await listModels(db);
      if (json) return io.out(JSON.stringify(models));
      if (models.length === 0) return io.out('no models yet: they appear with the first report');
      for (const line of table([['MODEL', 'POINTS_PER_JOB', 'NODES'], ...models.map((m) => [m.name, m.points_per_job === null ? 'default' : String(m.points_per_job), String(m.nodes)])])) io.out(line);
    },
  },
};

export interface ParsedCommand { name: string; command: Command; args: string[]; json: boolean; help: boolean }

/** Finds the command in argv (one or two words) and checks its arguments; throws UsageError. */
export function parseCommand(argv: string[]): ParsedCommand {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: { json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  });
  const two = positionals.slice(0, 2).join(' ');
  const name = COMMANDS[two] ? two : positionals[0] ?? '';
  const command = COMMANDS[name];
  if (!command) throw new UsageError(positionals.length ? `unknown command "${positionals.join(' ')}"` : 'no command given');
  const args = positionals.slice(name.split(' ').length);
  const help = values.help ?? false;
  if (!help && args.length !== command.args.length) {
    throw new UsageError(`"${name}" takes ${command.args.length ? command.args.join(' ') : 'no arguments'}; usage: ins ${command.usage}`);
  }
  return { name, command, args, json: values.json ?? false, help };
}

export const helpText = (c: Command): string => `usage: ins ${c.usage} [--json]\n\n${c.summary}`;

/** Runs a parsed command on an open database; returns the exit code. */
export async function runCommand(db: Database, argv: string[], io: Io): Promise<number> {
  try {
    const p = parseCommand(argv);
    if (p.help) {
      io.out(helpText(p.command));
      return 0;
    }
    // Every command works on a fresh data directory too.
    if (p.name !== 'migrate') await migrate(db);
    await p.command.run(db, p.args, p.json, io);
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      io.err(`ins: ${err.message}`);
      return 2;
    }
    if (err instanceof CommandError) {
      io.err(`ins: ${err.message}`);
      return 1;
    }
    if (err instanceof TypeError && (err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS')) {
      io.err(`ins: ${err.message}`);
      return 2;
    }
    throw err;
  }
}
