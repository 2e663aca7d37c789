// The one rule for whole numbers people type (src/whole-number.ts), and the CLI's flag of it
// (src/cli/io.ts): digits only, within bounds; what Number() would also take is refused.
import { describe, expect, it } from 'vitest';
import { wholeNumber } from '../src/whole-number.js';
import { UsageError, wholeNumberFlag } from '../src/cli/io.js';
import { EnvReader } from '../src/config-env.js';

describe('whole numbers typed by people', () => {
  it('takes digits within the bounds, and nothing that only Number() would take', () => {
    expect(wholeNumber('0', 0, 10)).toBe(0);
    expect(wholeNumber('10', 1, 10)).toBe(10);
    expect(wholeNumber('007', 1, 10)).toBe(7);
    for (const raw of ['', ' 5', '5 ', '+5', '-1', '1.0', '1e1', '0x1f', '0b1', 'five', '٥', '11', '99999999999999999'])
      expect(wholeNumber(raw, 0, 10), raw).toBeUndefined();
  });

  it('a CLI flag: absent is the default, wrong is a usage error that says the bounds and what was given', () => {
    expect(wholeNumberFlag('days', undefined, 1, 3660, 30)).toBe(30);
    expect(wholeNumberFlag('days', '90', 1, 3660, 30)).toBe(90);
    for (const raw of ['1e2', '0x1f', ' 5', '', '0', '3661']) {
      expect(() => wholeNumberFlag('days', raw, 1, 3660, 30)).toThrow(new UsageError(`--days must be a whole number from 1 to 3660, got "${raw}"`));
    }
  });

  it('an environment variable: the same rule, every problem collected, the default kept', () => {
    const env = new EnvReader({ A: '1e2', B: '0x10', C: ' 12 ' });
    expect([env.int('A', 5, 1, 1000), env.int('B', 6, 1, 1000), env.int('C', 7, 1, 1000)]).toEqual([5, 6, 12]);
    expect(env.problems).toEqual(['A="1e2": expected a whole number from 1 to 1000', 'B="0x10": expected a whole number from 1 to 1000']);
  });
});
