// Reading the environment for config.ts: each reader checks one variable and records what is
// wrong with it, so that every problem is reported at once.
import { wholeNumber } from './whole-number.js';
const SIZE = /^(\d+)\s*(b|kb|kib|mb|mib|gb|gib)?$/i;
const DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$/i;
const DURATION_UNITS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 };
// The examples a duration's error offers: those within the variable's range.
const DURATION_EXAMPLES: [string, number][] = [
  ['250ms', 0.25],
  ['30s', 30],
  ['5m', 300],
  ['6h', 21_600],
  ['7d', 604_800],
];
/** A duration in words for an error: whole seconds as they are, a fraction of one in ms. */
const spoken = (seconds: number): string => (seconds < 1 ? `${Math.round(seconds * 1000)} ms` : `${seconds} s`);
const SIZE_UNITS: Record<string, number> = { b: 1, kb: 1000, kib: 1024, mb: 1_000_000, mib: 1024 * 1024, gb: 1_000_000_000, gib: 1024 ** 3 };

export class EnvReader {
  readonly problems: string[] = [];
  /** Every variable asked for: the settings. */
  readonly read = new Set<string>();

  constructor(private readonly env: NodeJS.ProcessEnv) {}

  /** The trimmed value; undefined when unset or blank. */
  get(name: string): string | undefined {
    this.read.add(name);
    const v = this.env[name];
    return v === undefined || v.trim() === '' ? undefined : v.trim();
  }

  int(name: string, fallback: number, min: number, max: number): number {
    const raw = this.get(name);
    if (raw === undefined) return fallback;
    const n = wholeNumber(raw, min, max);
    if (n === undefined) this.problems.push(`${name}=${JSON.stringify(raw)}: expected a whole number from ${min} to ${max}`);
    return n ?? fallback;
  }

  /** A number from 0 to 1. */
  fraction(name: string, fallback: number): number {
    const raw = this.get(name);
    if (raw === undefined) return fallback;
    if (!/^(0(\.\d+)?|1(\.0+)?|\.\d+)$/.test(raw)) {
      this.problems.push(`${name}=${JSON.stringify(raw)}: expected a number from 0 to 1, e.g. 0.05`);
      return fallback;
    }
    return Number(raw);
  }

  bool(name: string, fallback: boolean): boolean {
    const raw = (this.get(name) ?? String(fallback)).toLowerCase();
    if (!['true', 'false', '1', '0', 'yes', 'no', 'on', 'off'].includes(raw))
      this.problems.push(`${name}=${JSON.stringify(raw)}: expected true or false (or on/off, yes/no, 1/0)`);
    return ['true', '1', 'yes', 'on'].includes(raw);
  }

  /** Seconds, from a number with an optional unit (ms, s, m, h, d); `zero` also accepts 0 (off). */
  duration(name: string, fallback: number, min: number, max: number, zero = false): number {
    const raw = this.get(name);
    if (raw === undefined) return fallback;
    const m = DURATION.exec(raw);
    const seconds = m ? Number(m[1]) * DURATION_UNITS[(m[2] ?? 's').toLowerCase()]! : NaN;
    if (zero && seconds === 0) return 0;
    if (!(seconds >= min && seconds <= max)) {
      const examples = DURATION_EXAMPLES.filter(([, v]) => v >= min && v <= max).map(([e]) => e);
      const eg = examples.length > 1 ? `${examples.slice(0, -1).join(', ')} or ${examples.at(-1)}` : (examples[0] ?? `${max}s`);
      this.problems.push(
        `${name}=${JSON.stringify(raw)}: expected a duration from ${spoken(min)} to ${spoken(max)}${zero ? ' or 0' : ''}, e.g. ${eg}`,
      );
      return fallback;
    }
    return seconds;
  }

  /** Bytes, from a number with an optional unit (b, kb, KiB, mb, MiB, gb, GiB; kb, mb and gb are powers of 1000). */
  size(name: string, fallback: number, min: number, max: number, example: string): number {
    const raw = this.get(name);
    if (raw === undefined) return fallback;
    const m = SIZE.exec(raw);
    const bytes = m ? Number(m[1]) * SIZE_UNITS[(m[2] ?? 'b').toLowerCase()]! : NaN;
    if (!(bytes >= min && bytes <= max)) {
      this.problems.push(
        `${name}=${JSON.stringify(raw)}: expected a size from ${example} (units b, kb, KiB, mb, MiB, gb, GiB; kb, mb and gb are powers of 1000)`,
      );
      return fallback;
    }
    return bytes;
  }
}

/** Levenshtein distance, stopping early past `most`. */
function distance(a: string, b: string, most: number): number {
  if (Math.abs(a.length - b.length) > most) return most + 1;
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = row;
  }
  return prev[b.length]!;
}

/**
 * Variables set that look like a misspelt setting: not one, within two edits of one, at least 7
 * characters (HOME is not HOST). A misspelt DATABASE_URL ran the server on the embedded database
 * without a word (an outside probe); any other variable of the environment is none of ours.
 */
export function misspeltSettings(env: NodeJS.ProcessEnv, settings: ReadonlySet<string>): { name: string; meant: string }[] {
  const out: { name: string; meant: string }[] = [];
  for (const name of Object.keys(env)) {
    if (settings.has(name) || name.length < 7 || !/^[A-Z][A-Z0-9_]*$/.test(name)) continue;
    const meant = [...settings].find((s) => distance(name, s, 2) <= 2);
    if (meant) out.push({ name, meant });
  }
  return out;
}
