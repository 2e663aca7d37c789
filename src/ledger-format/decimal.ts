// Points as exact decimals (docs/ledger.md, "Values"): the ledger sums them exactly, so they
// are strings in one canonical form — no sign, no exponent, no leading zero but the one before
// a point, no trailing zero after it ("0", "12", "0.5", "1.25") — added as scaled BigInts.
// Shared by the server, `ins ledger verify` and the dashboard (no Node-only import).

const CANONICAL = /^(0|[1-9]\d*)(\.\d*[1-9])?$/;
const LOOSE = /^(\d+)(?:\.(\d*))?$/;

/** A decimal as digits and a scale: value = digits / 10^scale. */
interface Scaled {
  digits: bigint;
  scale: number;
}

function parse(s: string): Scaled | undefined {
  const m = LOOSE.exec(s);
  if (!m) return undefined;
  const fraction = m[2] ?? '';
  return { digits: BigInt(m[1]! + fraction), scale: fraction.length };
}

function format({ digits, scale }: Scaled): string {
  const negative = digits < 0n;
  let text = (negative ? -digits : digits).toString().padStart(scale + 1, '0');
  if (scale > 0) text = `${text.slice(0, -scale)}.${text.slice(-scale)}`.replace(/\.?0+$/, '');
  return negative && text !== '0' ? `-${text}` : text;
}

const rescale = (a: Scaled, scale: number): bigint => a.digits * 10n ** BigInt(scale - a.scale);

export const isCanonicalDecimal = (s: string): boolean => CANONICAL.test(s);

/** "1.50" → "1.5", "007" → "7"; undefined when it is not a non-negative decimal. */
export function canonicalDecimal(s: string): string | undefined {
  const p = parse(s);
  return p ? format(p) : undefined;
}

/** a + b (non-negative decimals; throws on anything else). */
export function addDecimal(a: string, b: string): string {
  return combine(a, b, 1n);
}

/** a − b; may be negative ("-1.5"): a node's net points on a day with reversals of earlier credits. */
export function subtractDecimal(a: string, b: string): string {
  return combine(a, b, -1n);
}

function combine(a: string, b: string, sign: bigint): string {
  const x = parse(a);
  const y = parse(b);
  if (!x || !y) throw new Error(`not a decimal: ${x ? b : a}`);
  const scale = Math.max(x.scale, y.scale);
  return format({ digits: rescale(x, scale) + sign * rescale(y, scale), scale });
}

/**
 * A running sum of many decimals, most of them repeats of a few values (points per job):
 * counted by value as they come, multiplied out once at the end.
 */
export class DecimalSum {
  private readonly counts = new Map<string, number>();

  add(points: string): void {
    this.counts.set(points, (this.counts.get(points) ?? 0) + 1);
  }

  total(): string {
    let sum = '0';
    for (const [value, n] of this.counts) {
      const p = parse(value);
      if (!p) throw new Error(`not a decimal: ${value}`);
      sum = addDecimal(sum, format({ digits: p.digits * BigInt(n), scale: p.scale }));
    }
    return sum;
  }
}
