// The operator's commands that act on the database (everything but `serve`). Each validates
// its arguments before touching anything, so a bad call changes nothing.
import { parseArgs } from 'node:util';
import type { Database } from '../db/database.js';
import { migrate } from '../db/migrate.js';
import { createNode, listNodes, NodeExistsError, rotateNodeKey, setNodeDisabled } from '../repositories/nodes.js';
import { addReaderKey, listReaderKeys, revokeReaderKey } from '../repositories/reader-keys.js';
import { listModels, setModelPoints } from '../repositories/models.js';
import { nodesImport } from '../import/nodes.js';
import { resultsImport } from '../import/results.js';
import { ImportRejected, runImport, type ImportSpec } from '../import/run.js';
import { parsePoints } from '../points-value.js';
import { CommandError, table, UsageError, type Io } from './io.js';

export interface RunOptions {
  json: boolean;
  skipBadRows: boolean;
  /** Draw a progress bar on stderr (a local run on a terminal). */
  progress: boolean;
}

interface Command {
  usage: string;
  summary: string;
  args: string[];
  /** Options beyond --json and --help that this command accepts. */
  flags?: string[];
  run(db: Database, args: string[], opts: RunOptions, io: Io): Promise<void>;
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
    async run(db, [name], { json }, io) {
      if (!(await setNodeDisabled(db, name!, disabled))) throw new CommandError(`no node named "${name}"`);
      io.out(json ? JSON.stringify({ name, disabled }) : `node "${name}" ${verb}d`);
    },
  };
}

/** A command that lists rows: JSON with --json, else a table, or a hint when there are none. */
function listCommand<T>(spec: { usage: string; summary: string; load: (db: Database) => Promise<T[]>; empty: string; columns: string[]; row: (item: T) => string[] }): Command {
  return {
    usage: spec.usage,
    summary: spec.summary,
    args: [],
    async run(db, _args, { json }, io) {
      const items = await spec.load(db);
      if (json) return io.out(JSON.stringify(items));
      if (items.length === 0) return io.out(spec.empty);
      for (const line of table([spec.columns, ...items.map(spec.row)])) io.out(line);
    },
  };
}

const KEY_NOTE = 'Store this key now: it is shown only once and only its hash is kept.';

/**
 * A command that issues a key for its one argument: the key alone on stdout (or JSON with
 * --json, `fields` then `key`), the note on stderr, so `KEY=$(npx ins …)` works.
 */
function keyCommand(spec: {
  usage: string;
  summary: string;
  arg: string;
  /** Checked before anything is touched, when the argument names something new. */
  maxLength?: number;
  issue: (db: Database, value: string) => Promise<{ fields: Record<string, unknown>; key: string; note: string }>;
}): Command {
  return {
    usage: spec.usage,
    summary: spec.summary,
    args: [spec.arg],
    async run(db, [value], { json }, io) {
      if (spec.maxLength !== undefined) checkName(spec.arg, value!, spec.maxLength);
      const { fields, key, note } = await spec.issue(db, value!);
      io.out(json ? JSON.stringify({ ...fields, key }) : key);
      io.err(`${note} ${KEY_NOTE}`);
    },
  };
}

function importCommand(what: 'nodes' | 'results', spec: ImportSpec, summary: string): Command {
  return {
    usage: `import ${what} FILE.csv [--skip-bad-rows]`,
    summary,
    args: ['FILE.csv'],
    flags: ['skip-bad-rows'],
    async run(db, [file], { json, skipBadRows, progress }, io) {
      try {
        const s = await runImport(db, file!, spec, { skipBadRows, progress });
        if (json) return io.out(JSON.stringify(s));
        const rate = s.seconds > 0 ? Math.round(s.rows_read / s.seconds) : s.rows_read;
        io.out(`imported ${s.imported.toLocaleString('en')} ${what} of ${s.rows_read.toLocaleString('en')} rows in ${s.seconds.toFixed(1)} s (${rate.toLocaleString('en')} rows/s)` +
          (s.bad_rows ? `; skipped ${s.bad_rows} bad row${s.bad_rows === 1 ? '' : 's'}` : ''));
        for (const b of s.examples.slice(0, 20)) io.err(`  line ${b.line}: ${b.reason}`);
      } catch (err) {
        if (err instanceof ImportRejected) {
          throw new CommandError(`${err.message}:\n${err.examples.slice(0, 20).map((b) => `  line ${b.line}: ${b.reason}`).join('\n')}${err.examples.length > 20 ? '\n  …' : ''}`);
        }
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT' || code === 'EISDIR' || code === 'EACCES') throw new CommandError(`cannot read ${file}: ${code}`);
        if ((err as Error).name === 'CsvFormatError') throw new CommandError(`${file}: ${(err as Error).message}; nothing was imported`);
        throw err;
      }
    },
  };
}

export const COMMANDS: Record<string, Command> = {
  migrate: {
    usage: 'migrate',
    summary: 'apply pending database migrations',
    args: [],
    async run(db, _args, { json }, io) {
      const applied = await migrate(db);
      if (json) io.out(JSON.stringify({ applied }));
      else io.out(applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
    },
  },
  'node add': keyCommand({
    usage: 'node add NAME',
    summary: "create a node and print its key (nk_…) once",
    arg: 'NAME',
    maxLength: 128,
    async issue(db, name) {
      try {
        const { key } = await createNode(db, name);
        return { fields: { name }, key, note: `Node "${name}" created.` };
      } catch (err) {
        if (err instanceof NodeExistsError) throw new CommandError(`${err.message}; use "ins node rotate-key ${name}" for a new key`);
        throw err;
      }
    },
  }),
  'node list': listCommand({
    usage: 'node list',
    summary: 'list nodes with their status and points',
    load: listNodes,
    empty: 'no nodes yet; create one with: npx ins node add NAME',
    columns: ['NAME', 'STATUS', 'TOTAL_POINTS', 'LAST_DAY_WITH_POINTS', 'CREATED'],
    row: (n) => [n.name, n.disabled ? 'disabled' : 'active', String(n.total_points), n.last_day_with_points ?? '-', n.created_at],
  }),
  'node disable': setDisabledCommand(true),
  'node enable': setDisabledCommand(false),
  'node rotate-key': keyCommand({
    usage: 'node rotate-key NAME',
    summary: 'give a node a new key; the old one stops working at once',
    arg: 'NAME',
    async issue(db, name) {
      const key = await rotateNodeKey(db, name);
      if (!key) throw new CommandError(`no node named "${name}"`);
      return { fields: { name }, key, note: `New key for node "${name}"; the old key no longer works.` };
    },
  }),
  'key add-reader': keyCommand({
    usage: 'key add-reader LABEL',
    summary: "create a reader key (rk_…) for dashboards and print it once",
    arg: 'LABEL',
    maxLength: 128,
    async issue(db, label) {
      const { id, key } = await addReaderKey(db, label);
      return { fields: { id, label }, key, note: `Reader key ${id} ("${label}") created.` };
    },
  }),
  'key list': listCommand({
    usage: 'key list',
    summary: 'list reader keys (ids and labels, never the keys)',
    load: listReaderKeys,
    empty: 'no reader keys; create one with: npx ins key add-reader LABEL',
    columns: ['ID', 'LABEL', 'STATUS', 'CREATED'],
    row: (k) => [String(k.id), k.label, k.revoked ? 'revoked' : 'active', k.created_at],
  }),
  'key revoke': {
    usage: 'key revoke ID|LABEL',
    summary: 'revoke a reader key by id or by its (unique) label',
    args: ['ID|LABEL'],
    async run(db, [which], { json }, io) {
      const r = await revokeReaderKey(db, which!);
      if ('error' in r) throw new CommandError(r.error);
      io.out(json ? JSON.stringify({ id: r.id, revoked: true }) : `reader key ${r.id} revoked`);
    },
  },
  'model set-points': {
    usage: 'model set-points MODEL POINTS',
    summary: 'points a success of MODEL earns (a number >= 0, or "default")',
    args: ['MODEL', 'POINTS'],
    async run(db, [model, raw], { json }, io) {
      checkName('MODEL', model!, 256);
      const points = raw === 'default' ? null : parsePoints(raw!);
      if (points === undefined) {
        throw new UsageError(`POINTS must be a number >= 0 (e.g. 1 or 2.5) or "default", got "${raw}"`);
      }
      await setModelPoints(db, model!, points);
      io.out(json ? JSON.stringify({ model, points_per_job: points }) : `model "${model}": ${points === null ? 'default points' : `${points} points per job`}`);
    },
  },
  'import nodes': importCommand('nodes', nodesImport, 'import nodes with their existing keys: columns name,api_key or name,api_key_sha256'),
  'import results': importCommand('results', resultsImport,
    'import job results history: job_id,node_name,model_name,status,points,received_at[,result]; aggregates follow'),
  'model list': listCommand({
    usage: 'model list',
    summary: 'list models with their points per job and number of nodes',
    load: listModels,
    empty: 'no models yet: they appear with the first report',
    columns: ['MODEL', 'POINTS_PER_JOB', 'NODES'],
    row: (m) => [m.name, m.points_per_job === null ? 'default' : String(m.points_per_job), String(m.nodes)],
  }),
};

export interface ParsedCommand { name: string; command: Command; args: string[]; opts: RunOptions; help: boolean }

/** Finds the command in argv (one or two words) and checks its arguments; throws UsageError. */
export function parseCommand(argv: string[]): ParsedCommand {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: { json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' }, 'skip-bad-rows': { type: 'boolean' } },
  });
  const two = positionals.slice(0, 2).join(' ');
  const name = COMMANDS[two] ? two : positionals[0] ?? '';
  const command = COMMANDS[name];
  if (!command) throw new UsageError(positionals.length ? `unknown command "${positionals.join(' ')}"` : 'no command given');
  const args = positionals.slice(name.split(' ').length);
  const help = values.help ?? false;
  if (values['skip-bad-rows'] && !command.flags?.includes('skip-bad-rows')) throw new UsageError(`"${name}" has no option --skip-bad-rows`);
  if (!help && args.length !== command.args.length) {
    throw new UsageError(`"${name}" takes ${command.args.length ? command.args.join(' ') : 'no arguments'}; usage: ins ${command.usage}`);
  }
  const opts = { json: values.json ?? false, skipBadRows: values['skip-bad-rows'] ?? false, progress: false };
  return { name, command, args, opts, help };
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
    // Every command works on a fresh data directory too.
    if (p.name !== 'migrate') await migrate(db);
    await p.command.run(db, p.args, p.opts, io);
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
