// The one rule for a whole number typed by a person (a flag, an environment variable): digits
// only — no sign, fraction, exponent, hex or spaces, which Number() would take ("1e2", "0x1f",
// " 5 ") — within the bounds the caller names. A flag's problem reads the same wherever the flag
// is parsed (ins, ins worker, ins ledger verify --server); the environment's reads as config-env.ts words it.

/** `raw` as a whole number from min to max, or undefined when it is not one. */
export function wholeNumber(raw: string, min: number, max: number): number | undefined {
  if (!/^\d{1,16}$/.test(raw)) return undefined;
  const n = Number(raw);
  return n >= min && n <= max ? n : undefined;
}

/** What is wrong with `--flag raw`, when wholeNumber(raw, min, max) refused it. */
export const notWholeNumberFlag = (flag: string, raw: string, min: number, max: number): string =>
  `--${flag} must be a whole number from ${min} to ${max}, got "${raw}"`;
