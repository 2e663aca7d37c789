// The one module that turns request data + a generated TypeBox (JSON) schema into either the
// coerced value or the list of errors FastAPI/pydantic v2 would report: same `loc`, `msg`,
// `type`, `input` and `ctx`, every failure at once, pydantic's lax coercions ("7" and 7.0 are
// the integer 7; a number is not a string). Only the JSON-Schema subset of openapi.json is
// understood; an unknown shape throws at schema-compile time rather than validating wrongly.

import type { JsonDecodeFailure } from './python-json.js';
import { parseDateTime } from './datetime.js';

export type Loc = (string | number)[];
export interface PydanticError {
  type: string;
  loc: Loc;
  msg: string;
  input: unknown;
  ctx?: Record<string, unknown>;
}

export type HttpPart = 'body' | 'query' | 'header' | 'path';

/** Marker the body parser leaves when the body is not valid JSON (see http/content.ts). */
export class MalformedJson {
  constructor(readonly failure: JsonDecodeFailure) {}
}

interface Schema {
  type?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  anyOf?: Schema[];
  const?: unknown;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  minItems?: number;
  maxItems?: number;
  format?: string;
}

type Result = { ok: true; value: unknown } | { ok: false; errors: PydanticError[] };
const ok = (value: unknown): Result => ({ ok: true, value });
const fail = (type: string, loc: Loc, msg: string, input: unknown, ctx?: Record<string, unknown>): Result => ({
  ok: false,
  errors: [{ type, loc, msg, input, ...(ctx ? { ctx } : {}) }],
});

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function pyRepr(v: unknown): string {
  return typeof v === 'string' ? `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'` : String(v);
}

function expectedList(values: unknown[]): string {
  const reprs = values.map(pyRepr);
  return reprs.length <= 1 ? reprs.join('') : `${reprs.slice(0, -1).join(', ')} or ${reprs[reprs.length - 1]}`;
}

/**
 * Pydantic's error for a failed check of ours (a validator raising ValueError): type
 * `value_error`, the reason in `msg`. `ctx.error` is `{}`, as FastAPI sends it: pydantic puts the
 * ValueError itself there, and FastAPI's jsonable_encoder turns an exception into an empty object.
 * The one builder of these 422 items.
 */
export const valueError = (loc: Loc, error: string, input: unknown): PydanticError => ({
  type: 'value_error',
  loc,
  msg: `Value error, ${error}`,
  input,
  ctx: { error: {} },
});

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;

// PostgreSQL cannot store U+0000 or an unpaired UTF-16 surrogate in text or jsonb; pydantic
// would accept them and the database would then fail. Refused here with a location instead
// (a deliberate difference from FastAPI), at any depth: keys and values of free-form objects
// are walked with a stack of their own, not by recursion.
export const NUL_ERROR = 'text with the NUL character (\\u0000) or an unpaired surrogate cannot be stored';
// eslint-disable-next-line no-control-regex -- matching U+0000 is the point
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
/** Whether PostgreSQL cannot store this text. */
export const isUnstorable = (s: string): boolean => UNSTORABLE.test(s);
/** Whether any string or key in `v`, at any depth, is text PostgreSQL cannot store. */
export function hasUnstorableText(v: unknown): boolean {
  const stack: unknown[] = [v];
  while (stack.length > 0) {
    const x = stack.pop();
    if (typeof x === 'string') {
      if (UNSTORABLE.test(x)) return true;
    } else if (Array.isArray(x)) {
      for (const y of x as unknown[]) stack.push(y);
    } else if (typeof x === 'object' && x !== null) {
      for (const k in x) {
        if (UNSTORABLE.test(k)) return true;
        stack.push((x as Record<string, unknown>)[k]);
      }
    }
  }
  return false;
}
const UNSTORABLE_ALL = new RegExp(UNSTORABLE.source, 'g');
/** The text with each NUL and unpaired surrogate replaced by U+FFFD, as a UTF-8 encoder replaces the latter. */
export const storableText = (s: string): string => (UNSTORABLE.test(s) ? s.replace(UNSTORABLE_ALL, '\ufffd') : s);

/**
 * `v` itself when PostgreSQL can store all its text, else a copy with storableText() applied to
 * every string and key: for what a worker reports with a job key (routes/update-result.ts), where
 * a 422 would stop the seed's worker for hours over one odd character of a model's output.
 */
export function storableCopy<T>(v: T): T {
  if (!hasUnstorableText(v)) return v;
  const copy = (x: unknown): unknown => {
    if (typeof x === 'string') return storableText(x);
    if (Array.isArray(x)) return x.map(copy);
    if (typeof x === 'object' && x !== null) return Object.fromEntries(Object.entries(x).map(([k, y]) => [storableText(k), copy(y)]));
    return x;
  };
  return copy(v) as T;
}

const nulFail = (loc: Loc, input: unknown): Result => ({ ok: false, errors: [valueError(loc, NUL_ERROR, input)] });

function validateString(schema: Schema, v: unknown, loc: Loc): Result {
  if (typeof v !== 'string') return fail('string_type', loc, 'Input should be a valid string', v);
  if (UNSTORABLE.test(v)) return nulFail(loc, v);
  if (schema.format === 'date-time') {
    const parsed = parseDateTime(v);
    if (!parsed.ok) {
      return parsed.datetime
        ? fail('datetime_parsing', loc, `Input should be a valid datetime, ${parsed.error}`, v, { error: parsed.error })
        : fail('datetime_from_date_parsing', loc, `Input should be a valid datetime or date, ${parsed.error}`, v, { error: parsed.error });
    }
    return ok(parsed.iso);
  }
  // Python counts code points, not UTF-16 units.
  const length = schema.minLength !== undefined || schema.maxLength !== undefined ? [...v].length : 0;
  if (schema.minLength !== undefined && length < schema.minLength) {
    return fail('string_too_short', loc, `String should have at least ${plural(schema.minLength, 'character')}`, v, { min_length: schema.minLength });
  }
  if (schema.maxLength !== undefined && length > schema.maxLength) {
    return fail('string_too_long', loc, `String should have at most ${plural(schema.maxLength, 'character')}`, v, { max_length: schema.maxLength });
  }
  return ok(v);
}

function laxInteger(v: unknown, loc: Loc): Result {
  if (typeof v === 'boolean') return ok(v ? 1 : 0);
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) return fail('finite_number', loc, 'Input should be a finite number', v);
    if (!Number.isInteger(v)) return fail('int_from_float', loc, 'Input should be a valid integer, got a number with a fractional part', v);
    return ok(v);
  }
  if (typeof v === 'string') {
    // As pydantic-core reads it: Python's int() digits (single underscores between them), and a
    // fraction only of zeros with at least one ("3.0", not "3.").
    const m = /^\s*([+-]?\d+(?:_\d+)*)(?:\.0+)?\s*$/.exec(v);
    if (!m) return fail('int_parsing', loc, 'Input should be a valid integer, unable to parse string as an integer', v);
    return ok(Number(m[1]!.replace(/_/g, '')));
  }
  return fail('int_type', loc, 'Input should be a valid integer', v);
}

function validateInteger(schema: Schema, v: unknown, loc: Loc): Result {
  const r = laxInteger(v, loc);
  if (!r.ok) return r;
  const n = r.value as number;
  if (schema.minimum !== undefined && n < schema.minimum) {
    return fail('greater_than_equal', loc, `Input should be greater than or equal to ${schema.minimum}`, v, { ge: schema.minimum });
  }
  if (schema.maximum !== undefined && n > schema.maximum) {
    return fail('less_than_equal', loc, `Input should be less than or equal to ${schema.maximum}`, v, { le: schema.maximum });
  }
  return ok(n);
}

// A number as a string, as Python's float() reads it (single underscores between digits), and
// the infinities and NaN it also reads.
const DIGITS = '\\d+(?:_\\d+)*';
const FLOAT = new RegExp(`^\\s*[+-]?(?:${DIGITS}(?:\\.(?:${DIGITS})?)?|\\.${DIGITS})(?:[eE][+-]?${DIGITS})?\\s*$`);
const NON_FINITE = /^\s*[+-]?(?:inf|infinity|nan)\s*$/i;

// Python's repr of a float bound (1 → 1.0) in pydantic's messages.
const pyFloat = (n: number): string => (Number.isInteger(n) ? `${n}.0` : String(n));

function validateNumber(schema: Schema, v: unknown, loc: Loc): Result {
  let n: number;
  if (typeof v === 'boolean') n = v ? 1 : 0;
  else if (typeof v === 'number') n = v;
  else if (typeof v === 'string' && FLOAT.test(v)) n = Number(v.trim().replace(/_/g, ''));
  else if (typeof v === 'string' && NON_FINITE.test(v)) n = /n/i.test(v.trim().slice(-1)) ? NaN : v.trim().startsWith('-') ? -Infinity : Infinity;
  else if (typeof v === 'string') return fail('float_parsing', loc, 'Input should be a valid number, unable to parse string as a number', v);
  else return fail('float_type', loc, 'Input should be a valid number', v);
  // A bound refuses what pydantic's comparisons refuse ("inf", "nan"), le before ge as pydantic-core
  // checks them (only NaN fails both); a value no bound refused must still be finite here (JSON
  // has no NaN to carry it on).
  if (schema.maximum !== undefined && !(n <= schema.maximum)) {
    return fail('less_than_equal', loc, `Input should be less than or equal to ${pyFloat(schema.maximum)}`, v, { le: schema.maximum });
  }
  if (schema.minimum !== undefined && !(n >= schema.minimum)) {
    return fail('greater_than_equal', loc, `Input should be greater than or equal to ${pyFloat(schema.minimum)}`, v, { ge: schema.minimum });
  }
  if (!Number.isFinite(n)) return fail('finite_number', loc, 'Input should be a finite number', v);
  return ok(n);
}

function validateArray(schema: Schema, v: unknown, loc: Loc): Result {
  if (!Array.isArray(v)) return fail('list_type', loc, 'Input should be a valid list', v);
  const items = v as unknown[];
  if (schema.maxItems !== undefined && items.length > schema.maxItems) {
    return fail('too_long', loc, `List should have at most ${plural(schema.maxItems, 'item')} after validation, not ${items.length}`, v, {
      field_type: 'List',
      max_length: schema.maxItems,
      actual_length: items.length,
    });
  }
  const out: unknown[] = [];
  const errors: PydanticError[] = [];
  items.forEach((item, i) => {
    const r = schema.items ? validateValue(schema.items, item, [...loc, i]) : ok(item);
    if (r.ok) out.push(r.value);
    else errors.push(...r.errors);
  });
  if (errors.length > 0) return { ok: false, errors };
  if (schema.minItems !== undefined && out.length < schema.minItems) {
    return fail('too_short', loc, `List should have at least ${plural(schema.minItems, 'item')} after validation, not ${out.length}`, v, {
      field_type: 'List',
      min_length: schema.minItems,
      actual_length: out.length,
    });
  }
  return ok(out);
}

function validateObject(schema: Schema, v: unknown, loc: Loc, missingInput: (obj: Record<string, unknown>) => unknown): Result {
  const props = schema.properties ?? {};
  if (Object.keys(props).length === 0) {
    // A free-form object is a Python dict.
    if (!isPlainObject(v)) return fail('dict_type', loc, 'Input should be a valid dictionary', v);
    return hasUnstorableText(v) ? nulFail(loc, v) : ok(v);
  }
  if (!isPlainObject(v)) {
    return fail('model_attributes_type', loc, 'Input should be a valid dictionary or object to extract fields from', v);
  }
  const required = new Set(schema.required ?? []);
  const out: Record<string, unknown> = {};
  const errors: PydanticError[] = [];
  for (const [name, prop] of Object.entries(props)) {
    const fieldLoc = [...loc, name];
    if (!Object.prototype.hasOwnProperty.call(v, name) || v[name] === undefined) {
      if (required.has(name)) errors.push({ type: 'missing', loc: fieldLoc, msg: 'Field required', input: missingInput(v) });
      continue;
    }
    const r = validateValue(prop, v[name], fieldLoc);
    if (r.ok) out[name] = r.value;
    else errors.push(...r.errors);
  }
  return errors.length > 0 ? { ok: false, errors } : ok(out);
}

function validateValue(schema: Schema, v: unknown, loc: Loc): Result {
  if (schema.anyOf) {
    const consts = schema.anyOf.filter((s) => 'const' in s);
    if (consts.length === schema.anyOf.length) {
      const allowed = consts.map((s) => s.const);
      if (allowed.includes(v)) return ok(v);
      const expected = expectedList(allowed);
      return fail('literal_error', loc, `Input should be ${expected}`, v, { expected });
    }
    // Optional[X]: null passes, anything else is validated as X (pydantic adds no union tag).
    const others = schema.anyOf.filter((s) => s.type !== 'null');
    if (others.length === 1 && others.length < schema.anyOf.length) {
      return v === null ? ok(null) : validateValue(others[0]!, v, loc);
    }
    throw new Error('unsupported anyOf in request schema');
  }
  switch (schema.type) {
    case 'string':
      return validateString(schema, v, loc);
    case 'integer':
      return validateInteger(schema, v, loc);
    case 'number':
      return validateNumber(schema, v, loc);
    case 'array':
      return validateArray(schema, v, loc);
    case 'object':
      return validateObject(schema, v, loc, (obj) => obj);
    case undefined:
      return ok(v);
    default:
      throw new Error(`unsupported request schema type ${schema.type}`);
  }
}

/** Query strings repeat keys as arrays; like Starlette, a scalar parameter takes the last one.
 * `null` and the empty string mean "not given" for optional parameters (docs/api.md, "Decisions where the contract was silent"). */
function normaliseQuery(schema: Schema, raw: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const required = new Set(schema.required ?? []);
  for (const [k, v] of Object.entries(raw)) {
    const last: unknown = Array.isArray(v) ? v[v.length - 1] : v;
    if (!required.has(k) && (last === '' || last === 'null')) continue;
    out[k] = last;
  }
  return out;
}

/**
 * Validates one part of a request. The body follows FastAPI's rules for a single body model:
 * absent → `missing` at `["body"]`, not an object → `model_attributes_type`, malformed JSON →
 * `json_invalid` at `["body", offset]`. Query and header parts are always objects; a missing
 * parameter reports `input: null` as FastAPI does.
 */
export function validatePart(schema: unknown, part: HttpPart, data: unknown): Result {
  const s = schema as Schema;
  if (part === 'body') {
    if (data instanceof MalformedJson) {
      return fail('json_invalid', ['body', data.failure.pos], 'JSON decode error', {}, { error: data.failure.msg });
    }
    if (data === undefined || data === null) return fail('missing', ['body'], 'Field required', null);
    return validateObject(s, data, ['body'], (obj) => obj);
  }
  const obj = isPlainObject(data) ? data : {};
  const input = part === 'query' ? normaliseQuery(s, obj) : obj;
  return validateObject(s, input, [part], () => null);
}
