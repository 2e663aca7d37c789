// Points values written by people (src/points-value.ts): any plain decimal for imported history,
// and for a price (`ins model set-points`, DEFAULT_POINTS_PER_JOB) at most 15 significant digits,
// which every view (get_points, daily_points, the ledger) then shows exactly as written.
import { describe, expect, it } from 'vitest';
import { parsePoints, parsePrice, PRICE_RULE } from '../src/points-value.js';
import { loadConfig } from '../src/config.js';

describe('points values', () => {
  it('takes a price of up to 15 significant digits, leading and trailing zeros aside', () => {
    for (const [text, value] of [
      ['0', 0],
      ['2.5', 2.5],
      ['1000000', 1e6],
      ['0.000123456789012345', 0.000123456789012345],
      ['123456789.012345', 123456789.012345],
      ['1000000000', 1e9],
    ] as const) {
      expect(parsePrice(text), text).toBe(value);
    }
  });

  it('refuses a price it would round (an outside probe: 0.1234567890123456789 credited as 0.12345678901234568), an exponent, a sign', () => {
    for (const text of ['0.1234567890123456789', '1234567890.12345', '1e6', '-1', '+1', ' 1', '1000000001'])
      expect(parsePrice(text), text).toBeUndefined();
    // Imported history keeps what was credited, however many digits.
    expect(parsePoints('0.30000000000000004')).toBe(0.30000000000000004);
    expect(PRICE_RULE).toMatch(/at most 15 significant digits/);
  });

  it('DEFAULT_POINTS_PER_JOB follows the price rule, and says it', () => {
    expect(() => loadConfig({ DEFAULT_POINTS_PER_JOB: '0.1234567890123456789' })).toThrow(
      /DEFAULT_POINTS_PER_JOB="0\.1234567890123456789": expected a plain decimal number >= 0 and <= 1000000000, of at most 15 significant digits/,
    );
    expect(loadConfig({ DEFAULT_POINTS_PER_JOB: '2.5' }).defaultPointsPerJob).toBe(2.5);
  });
});
