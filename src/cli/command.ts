// What a command of `ins` is, and the shapes most of them share: a list printed as a table
// (or JSON), a key issued once. Each command checks its arguments before touching anything, so
// a bad call changes nothing.
import type { Database } from '../db/database.js';
import type { CoordinatorConfig } from '../config.js';
import type { VerifyConfig } from '../config-verify.js';
import { Lifecycle } from '../jobs/lifecycle.js';
import { pauseAfter } from '../jobs/sql/sweep.js';
import { NodeLifecycle } from '../nodes/lifecycle.js';
import { table, UsageError, type Io } from './io.js';

export interface RunOptions {
  json: boolean;
  skipBadRows: boolean;
  /** --apply of verify calibrate: write what it proposes. */
  apply: boolean;
  /** Draw a progress bar on stderr (a local run on a terminal). */
  progress: boolean;
  /** --state, --model, --limit of the listing commands; --days of ledger verify; --jobs, --tokens of key set-quota; --min-answers of verify calibrate. */
  filter: { state?: string; model?: string; limit?: string; days?: string; jobs?: string; tokens?: string; minAnswers?: string };
  /** The coordinator's settings of the process running the command (online window, MODELS_TTL). */
  coordinator: CoordinatorConfig;
  /** The verification settings of that process (evidence window, strikes that suspend). */
  verify: VerifyConfig;
  /** LEDGER_KEY_FILE of that process (ins ledger close). */
  ledgerKeyFile?: string;
  /** The working directory of the `ins` that sent the command over the admin socket: relative FILE arguments are read from there. */
  cwd?: string;
  /** The running server's job lifecycle, when the command runs inside it (the admin socket): its outcomes apply there at once. */
  jobs?: Lifecycle;
}

/**
 * The job lifecycle for an operator's command: the server's when the command runs inside it,
 * else one of this process, whose changes the servers hear as another server's (NOTIFY).
 */
export function operatorJobs(db: Database, opts: RunOptions): Lifecycle {
  return (
    opts.jobs ??
    new Lifecycle(db, {
      maxAttempts: opts.coordinator.maxAttempts,
      leaseTimeout: opts.coordinator.leaseTimeout,
      defaultPoints: 0,
      checkPrice: opts.verify.checkPrice,
      audit: false,
      onError: () => {},
      stranding: { onlineWindow: opts.coordinator.onlineWindow, modelsTtl: opts.coordinator.modelsTtl, grace: opts.coordinator.noNodeGrace },
      pauseAfter: pauseAfter(opts.coordinator.sweepInterval),
    })
  );
}

/**
 * The node lifecycle for an operator's command: one of its own (its announcements reach the
 * servers of this process at once, others by NOTIFY), handing leases back through
 * operatorJobs.
 */
export function operatorNodes(db: Database, opts: RunOptions): NodeLifecycle {
  return new NodeLifecycle(db, operatorJobs(db, opts));
}

export interface Command {
  usage: string;
  summary: string;
  args: string[];
  /** Options beyond --json and --help that this command accepts. */
  flags?: string[];
  run(db: Database, args: string[], opts: RunOptions, io: Io): Promise<void>;
}

export function checkName(what: string, value: string, max: number): void {
  const length = [...value].length;
  if (length < 1 || length > max) throw new UsageError(`${what} must be 1 to ${max} characters (got ${length})`);
}

/** A command that lists rows: JSON with --json, else a table, or a hint when there are none. */
export function listCommand<T>(spec: {
  usage: string;
  summary: string;
  flags?: string[];
  load: (db: Database, opts: RunOptions) => Promise<T[]>;
  empty: string;
  columns: string[];
  row: (item: T) => string[];
}): Command {
  return {
    usage: spec.usage,
    summary: spec.summary,
    args: [],
    ...(spec.flags ? { flags: spec.flags } : {}),
    async run(db, _args, opts, io) {
      const items = await spec.load(db, opts);
      if (opts.json) return io.out(JSON.stringify(items));
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
export function keyCommand(spec: {
  usage: string;
  summary: string;
  arg: string;
  /** Checked before anything is touched, when the argument names something new. */
  maxLength?: number;
  issue: (db: Database, value: string, opts: RunOptions) => Promise<{ fields: Record<string, unknown>; key: string; note: string }>;
}): Command {
  return {
    usage: spec.usage,
    summary: spec.summary,
    args: [spec.arg],
    async run(db, [value], opts, io) {
      if (spec.maxLength !== undefined) checkName(spec.arg, value!, spec.maxLength);
      const { fields, key, note } = await spec.issue(db, value!, opts);
      io.out(opts.json ? JSON.stringify({ ...fields, key }) : key);
      io.err(`${note} ${KEY_NOTE}`);
    },
  };
}
