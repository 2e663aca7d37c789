// Where and why Python's `json.loads` would reject a body, so that malformed JSON gets the same
// `["body", <char offset>]` location and `ctx.error` message as the FastAPI service we replace.
// Only called after JSON.parse has already failed (the hot path never runs this scanner).
// Follows CPython 3.12's json.decoder/_json.c; offsets are in code points, as in Python.
//
// Nesting: Python's decoder recurses and raises RecursionError (not a decode error) past its
// recursion limit, about 1,000 levels, which FastAPI answers with 400 "There was an error
// parsing the body". Ours is MAX_JSON_DEPTH, lower than Python's and than what JavaScript's
// own recursion (JSON.stringify, this scanner) survives: deeper documents, well-formed or
// not, throw JsonTooDeep.

export interface JsonDecodeFailure {
  pos: number;
  msg: string;
}

/** Most levels of arrays and objects inside one another in a request body. */
export const MAX_JSON_DEPTH = 512;

/** A document nested deeper than MAX_JSON_DEPTH (Python's RecursionError). */
export class JsonTooDeep extends Error {
  constructor() {
    super(`JSON nested deeper than ${MAX_JSON_DEPTH} levels`);
  }
}

/** Whether a parsed JSON value holds a container below `levels` levels (walks containers only, stops at the first). */
function deeperThan(v: unknown, levels: number): boolean {
  if (typeof v !== 'object' || v === null) return false;
  if (levels === 0) return true;
  if (Array.isArray(v)) return v.some((x) => deeperThan(x, levels - 1));
  for (const k in v) if (deeperThan((v as Record<string, unknown>)[k], levels - 1)) return true;
  return false;
}

/** Whether `text` holds more than MAX_JSON_DEPTH opening brackets (inside strings too: an upper bound of its depth). */
function manyBrackets(text: string): boolean {
  let n = 0;
  for (const bracket of ['{', '[']) {
    for (let i = text.indexOf(bracket); i !== -1; i = text.indexOf(bracket, i + 1)) if (++n > MAX_JSON_DEPTH) return true;
  }
  return false;
}

/** Whether the value JSON.parse made of `text` is nested deeper than MAX_JSON_DEPTH. */
export function tooDeep(text: string, value: unknown): boolean {
  // A level takes two characters and an opening bracket at least: most documents need no walk.
  return text.length > 2 * MAX_JSON_DEPTH && manyBrackets(text) && deeperThan(value, MAX_JSON_DEPTH);
}

const WS = new Set([' ', '\t', '\n', '\r']);
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?/y;

class Fail extends Error {
  constructor(
    readonly msg: string,
    readonly at: number,
  ) {
    super(msg);
  }
}
// scan_once's StopIteration: "Expecting value" at the given index.
class NoValue extends Error {
  constructor(readonly at: number) {
    super('Expecting value');
  }
}

function skipWs(s: string, i: number): number {
  while (i < s.length && WS.has(s[i]!)) i++;
  return i;
}

function scanString(s: string, end: number): number {
  const begin = end - 1;
  for (;;) {
    if (end >= s.length) throw new Fail('Unterminated string starting at', begin);
    const c = s.charCodeAt(end);
    if (c === 0x22) return end + 1; // closing quote
    if (c < 0x20) throw new Fail('Invalid control character at', end);
    if (c !== 0x5c) {
      end++;
      continue;
    }
    // backslash escape
    end++;
    if (end >= s.length) throw new Fail('Unterminated string starting at', begin);
    const e = s[end]!;
    if (e === 'u') {
      const hex = s.slice(end + 1, end + 5);
      if (!/^[0-9a-fA-F]{4}$/.test(hex)) throw new Fail('Invalid \\uXXXX escape', end - 1);
      end += 5;
    } else if ('"\\/bfnrt'.includes(e)) {
      end++;
    } else {
      throw new Fail('Invalid \\escape', end - 1);
    }
  }
}

function scanObject(s: string, end: number, depth: number): number {
  end = skipWs(s, end);
  if (s[end] === '}') return end + 1;
  if (s[end] !== '"') throw new Fail('Expecting property name enclosed in double quotes', end);
  end++;
  for (;;) {
    end = scanString(s, end);
    end = skipWs(s, end);
    if (s[end] !== ':') throw new Fail("Expecting ':' delimiter", end);
    end = skipWs(s, end + 1);
    const after = afterItem(s, scanValueOrFail(s, end, depth), '}');
    if (after.done) return after.end;
    end = after.end;
    if (s[end] !== '"') throw new Fail('Expecting property name enclosed in double quotes', end);
    end++;
  }
}

function scanArray(s: string, end: number, depth: number): number {
  end = skipWs(s, end);
  if (s[end] === ']') return end + 1;
  for (;;) {
    const after = afterItem(s, scanValueOrFail(s, end, depth), ']');
    if (after.done) return after.end;
    end = after.end;
  }
}

/** After a member of an object or array: past `close` (done), or past ',' and white space. */
function afterItem(s: string, end: number, close: string): { end: number; done: boolean } {
  end = skipWs(s, end);
  const next = s[end];
  if (next === close) return { end: end + 1, done: true };
  if (next !== ',') throw new Fail("Expecting ',' delimiter", end);
  return { end: skipWs(s, end + 1), done: false };
}

/** `depth`: the containers around the value. */
function scanValueOrFail(s: string, i: number, depth: number): number {
  try {
    return scanValue(s, i, depth);
  } catch (e) {
    if (e instanceof NoValue) throw new Fail('Expecting value', e.at);
    throw e;
  }
}

function scanValue(s: string, i: number, depth: number): number {
  if (i >= s.length) throw new NoValue(i);
  const c = s[i]!;
  if (c === '"') return scanString(s, i + 1);
  if ((c === '{' || c === '[') && depth >= MAX_JSON_DEPTH) throw new JsonTooDeep();
  if (c === '{') return scanObject(s, i + 1, depth + 1);
  if (c === '[') return scanArray(s, i + 1, depth + 1);
  for (const word of ['null', 'true', 'false']) {
    if (s.startsWith(word, i)) return i + word.length;
  }
  // Python also accepts NaN/Infinity; JSON.parse does not, so they stay "Expecting value" here.
  NUMBER.lastIndex = i;
  const m = NUMBER.exec(s);
  if (m) return i + m[0].length;
  throw new NoValue(i);
}

function codePointOffset(s: string, utf16Index: number): number {
  let n = 0;
  for (let i = 0; i < utf16Index && i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    n++;
  }
  return n;
}

/**
 * The failure Python would report for `text`, or null if Python would accept it. Throws
 * JsonTooDeep for a document nested deeper than MAX_JSON_DEPTH before its first error.
 */
export function pythonJsonFailure(text: string): JsonDecodeFailure | null {
  let pos: number;
  let msg: string;
  try {
    const start = skipWs(text, 0);
    const end = skipWs(text, scanValueOrFail(text, start, 0));
    if (end === text.length) return null;
    pos = end;
    msg = 'Extra data';
  } catch (e) {
    if (!(e instanceof Fail)) throw e;
    pos = e.at;
    msg = e.msg;
  }
  return { pos: codePointOffset(text, pos), msg };
}
