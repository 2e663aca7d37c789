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

/** Significant digits a price may have: what a float8 keeps exactly, and so what get_points and daily_points show as written. */
export const PRICE_DIGITS = 15;

/**
 * A price set by a person (`ins model set-points`, DEFAULT_POINTS_PER_JOB): parsePoints' rule, and
 * at most PRICE_DIGITS significant digits. A longer one was rounded silently, and the views
 * disagreed in its last digits (an outside probe: 0.1234567890123456789 credited as
 * 0.12345678901234568, summed as 0.370370367037037 by get_points, 0.37037036703703704 in the
 * ledger). Imported history keeps parsePoints alone: a report's points are whatever was credited.
 */
export function parsePrice(text: string): number | undefined {
  const digits = text.replace('.', '').replace(/^0+/, '').replace(/0+$/, '').length;
  return digits <= PRICE_DIGITS ? parsePoints(text) : undefined;
}

/** Why `text` is no price, in words (for the CLI and the configuration's messages). */
export const PRICE_RULE = `a plain decimal number >= 0 and <= ${MAX_POINTS}, of at most ${PRICE_DIGITS} significant digits, without an exponent (e.g. 1, 2.5 or 1000000)`;
