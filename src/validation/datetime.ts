// Parses query date-times the way pydantic v2 (speedate) does in lax mode, and reports failures
// with speedate's wording. A date alone is midnight; no offset means UTC (our decision:
// docs/api.md, "Semantics", Windows).
// Values are normalised to `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`, with microsecond precision kept as
// text because JS dates stop at milliseconds and PostgreSQL timestamps go to microseconds.

/** A failure is speedate's (`datetime_from_date_parsing`), or, with `datetime`, Python's datetime refusing what speedate read (`datetime_parsing`: year 0). */
export type DateTimeParse = { ok: true; iso: string } | { ok: false; error: string; datetime?: true };

const DATETIME = /^(\d{4})-(\d{2})-(\d{2})[Tt_ ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,6})\d*)?)?(?:([Zz])|([+-])(\d{2}):?(\d{2}))?$/;
const TIMESTAMP = /^[+-]?\d+(?:\.\d*)?$/;

function daysInMonth(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

function pad(n: number, width = 2): string {
  return String(n).padStart(width, '0');
}

function format(epochMs: number, micros: string): string {
  const d = new Date(epochMs);
  // Python's datetime (and so pydantic) covers the years 1 to 9999.
  if (Number.isNaN(d.getTime()) || d.getUTCFullYear() < 1 || d.getUTCFullYear() > 9999) throw new RangeError('date out of range');
  const base = `${pad(d.getUTCFullYear(), 4)}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}T${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
  const frac = micros.replace(/0+$/, '');
  return `${base}${frac ? `.${frac}` : ''}Z`;
}

// speedate's Date::parse_bytes_rfc3339 error, used for the "valid datetime or date" message.
// speedate reads bytes: a character beyond ASCII is several, none of them a digit.
function dateError(text: string): string | null {
  const s = Buffer.from(text, 'utf8').toString('latin1');
  if (s.length < 10) return 'input is too short';
  if (!/^\d{4}$/.test(s.slice(0, 4))) return 'invalid character in year';
  if (s[4] !== '-') return 'invalid date separator, expected `-`';
  if (!/^\d{2}$/.test(s.slice(5, 7))) return 'invalid character in month';
  if (s[7] !== '-') return 'invalid date separator, expected `-`';
  if (!/^\d{2}$/.test(s.slice(8, 10))) return 'invalid character in day';
  const year = Number(s.slice(0, 4));
  const month = Number(s.slice(5, 7));
  const day = Number(s.slice(8, 10));
  if (month < 1 || month > 12) return 'month value is outside expected range of 1-12';
  if (day < 1 || day > daysInMonth(year, month)) return 'day value is outside expected range';
  if (s.length > 10) return 'unexpected extra characters at the end of the input';
  return null;
}

function fromDateTime(m: RegExpExecArray): string | null {
  const [, y, mo, d, h, mi, sec = '0', frac = '', z, sign, oh = '0', om = '0'] = m;
  const year = Number(y),
    month = Number(mo),
    day = Number(d);
  const hour = Number(h),
    minute = Number(mi),
    second = Number(sec);
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return null;
  if (hour > 23 || minute > 59 || second > 59) return null;
  const offHours = Number(oh),
    offMinutes = Number(om);
  if (offHours > 23 || offMinutes > 59) return null;
  const offset = z || !sign ? 0 : (sign === '-' ? -1 : 1) * (offHours * 60 + offMinutes);
  const micros = frac.padEnd(6, '0');
  const ms = Date.UTC(year, month - 1, day, hour, minute, second) + Math.floor(Number(micros) / 1000) - offset * 60_000;
  // Date.UTC maps years 0-99 to 1900s; rebuild through setUTCFullYear for those.
  const fixed =
    year < 100
      ? (() => {
          const t = new Date(ms);
          t.setUTCFullYear(t.getUTCFullYear() - 1900);
          return t.getTime();
        })()
      : ms;
  return format(fixed, micros);
}

// speedate accepts a number as a Unix timestamp: seconds, or milliseconds above 2e10.
function fromTimestamp(s: string): string | null {
  const value = Number(s.trim());
  if (!Number.isFinite(value)) return null;
  const seconds = Math.abs(value) > 2e10 ? value / 1000 : value;
  const wholeMs = Math.floor(seconds) * 1000;
  const micros = Math.round((seconds - Math.floor(seconds)) * 1e6);
  if (Math.abs(wholeMs) > 8.64e15) return null;
  return format(wholeMs + Math.floor(micros / 1000), pad(micros, 6));
}

/** A normalised instant in fixed-width form (fraction padded to microseconds), so that
 * instants compare as strings, also with PostgreSQL's `…SS.US"Z"` text. */
export const instantKey = (iso: string): string => iso.replace(/(?:\.(\d+))?Z$/, (_m, f: string | undefined) => `.${(f ?? '').padEnd(6, '0')}Z`);

export function parseDateTime(s: string): DateTimeParse {
  try {
    const m = DATETIME.exec(s);
    // Year 0: speedate reads it, Python's datetime does not. Otherwise valid as year 2000 is (both leap years).
    if (s.startsWith('0000-')) {
      const as2000 = `2000${s.slice(4)}`;
      const m2000 = DATETIME.exec(as2000);
      if (m2000 ? fromDateTime(m2000) !== null : dateError(as2000) === null) return { ok: false, error: 'year 0 is out of range', datetime: true };
    }
    const viaDateTime = m ? fromDateTime(m) : TIMESTAMP.test(s) ? fromTimestamp(s) : null;
    if (viaDateTime) return { ok: true, iso: viaDateTime };
    const error = dateError(s);
    if (error) return { ok: false, error };
    if (s.startsWith('0000')) return { ok: false, error: 'value is outside expected range' };
    return { ok: true, iso: `${s}T00:00:00Z` };
  } catch {
    return { ok: false, error: 'value is outside expected range' };
  }
}
