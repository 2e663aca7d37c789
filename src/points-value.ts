// The one rule for a points value written by a person (the CLI, the configuration, an
// imported file): a plain decimal number >= 0, at most 1e9. Anything else is refused rather
// than guessed (no exponents, signs or spaces).
const DECIMAL = /^\d+(\.\d+)?$/;
export const MAX_POINTS = 1e9;

/** The value, or undefined when the text is not a valid points value. */
export function parsePoints(text: string): number | undefined {
  const n = Number(text);
  return DECIMAL.test(text) && Number.isFinite(n) && n <= MAX_POINTS ? n : undefined;
}
