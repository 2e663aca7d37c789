// How CLI commands talk back: collected lines for stdout and stderr, so the same command runs
// in this process or inside the server (over the admin socket) with identical output.
import { notWholeNumberFlag, wholeNumber } from '../whole-number.js';

export interface Io {
  out(line: string): void;
  err(line: string): void;
}

/** Arguments the user got wrong: the message and the usage, exit code 2. */
export class UsageError extends Error {}

/** A flag's whole number from min to max (src/whole-number.ts), `fallback` when it is absent; a usage error otherwise. */
export function wholeNumberFlag(flag: string, raw: string | undefined, min: number, max: number, fallback: number): number {
  if (raw === undefined) return fallback;
  const n = wholeNumber(raw, min, max);
  if (n === undefined) throw new UsageError(notWholeNumberFlag(flag, raw, min, max));
  return n;
}

/** A command that ran but could not do what was asked (no such node...): exit code 1. */
export class CommandError extends Error {}

/** Arguments the user got wrong: ours (UsageError) or those Node's argument parser refused (ERR_PARSE_ARGS_*). */
export const isUsageError = (err: unknown): boolean =>
  err instanceof UsageError || (err instanceof TypeError && (err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS') === true);

/** A command's failure: its message on stderr and, for a script that asked for --json, `{"error": …}` on stdout (docs/cli.md). */
export function reportFailure(io: Io, argv: readonly string[], message: string): void {
  io.err(`ins: ${message}`);
  if (argv.includes('--json')) io.out(JSON.stringify({ error: message }));
}

export const consoleIo: Io = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
};

export function bufferIo(): Io & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return { stdout, stderr, out: (l) => stdout.push(l), err: (l) => stderr.push(l) };
}

/** Left-aligned columns for human output. */
export function table(rows: string[][]): string[] {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd(),
  );
}
