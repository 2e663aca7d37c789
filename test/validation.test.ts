// Table-driven test of the pydantic translation (src/validation): every row of docs/errors.md's
// table and each field of each endpoint, with the exact FastAPI/pydantic v2 error objects.
import { describe, expect, it } from 'vitest';
import { DailyPointsRequest, GetResultQuery, UniqueNodesQuery, UpdateResultRequest } from '../src/generated/schemas.js';
import { MalformedJson, validatePart, type PydanticError } from '../src/validation/pydantic.js';
import { JsonTooDeep, MAX_JSON_DEPTH, pythonJsonFailure } from '../src/validation/python-json.js';
import { parseDateTime } from '../src/validation/datetime.js';
import { parseJsonBody } from '../src/http/content.js';

const good = { job_id: 'j1', api_key: 'nk_x', model_name: 'llama3.2:latest', result: { message: 'hi' }, status: 'success' };
const goodPoints = { node_name: 'alpha', last_days: 7 };

type Case = [name: string, schema: unknown, part: 'body' | 'query', input: unknown, errors: PydanticError[]];

const DT = (input: string, error: string): PydanticError => ({
  type: 'datetime_from_date_parsing',
  loc: ['query', 'start_date'],
  msg: `Input should be a valid datetime or date, ${error}`,
  input,
  ctx: { error },
});

const cases: Case[] = [
  // docs/errors.md's table, row by row.
  [
    'missing body field',
    UpdateResultRequest,
    'body',
    { ...good, job_id: undefined },
    [{ type: 'missing', loc: ['body', 'job_id'], msg: 'Field required', input: { ...good, job_id: undefined } }],
  ],
  ['body absent', UpdateResultRequest, 'body', undefined, [{ type: 'missing', loc: ['body'], msg: 'Field required', input: null }]],
  ['body JSON null', UpdateResultRequest, 'body', null, [{ type: 'missing', loc: ['body'], msg: 'Field required', input: null }]],
  [
    'body not an object (array)',
    UpdateResultRequest,
    'body',
    [1, 2],
    [{ type: 'model_attributes_type', loc: ['body'], msg: 'Input should be a valid dictionary or object to extract fields from', input: [1, 2] }],
  ],
  [
    'body not an object (string)',
    DailyPointsRequest,
    'body',
    'text',
    [{ type: 'model_attributes_type', loc: ['body'], msg: 'Input should be a valid dictionary or object to extract fields from', input: 'text' }],
  ],
  [
    'malformed JSON',
    UpdateResultRequest,
    'body',
    new MalformedJson({ pos: 9, msg: 'Expecting value' }),
    [{ type: 'json_invalid', loc: ['body', 9], msg: 'JSON decode error', input: {}, ctx: { error: 'Expecting value' } }],
  ],
  [
    'number where string expected',
    UpdateResultRequest,
    'body',
    { ...good, job_id: 42 },
    [{ type: 'string_type', loc: ['body', 'job_id'], msg: 'Input should be a valid string', input: 42 }],
  ],
  [
    'result not an object',
    UpdateResultRequest,
    'body',
    { ...good, result: 'done' },
    [{ type: 'dict_type', loc: ['body', 'result'], msg: 'Input should be a valid dictionary', input: 'done' }],
  ],
  [
    'result is a list',
    UpdateResultRequest,
    'body',
    { ...good, result: [] },
    [{ type: 'dict_type', loc: ['body', 'result'], msg: 'Input should be a valid dictionary', input: [] }],
  ],
  [
    'bad status',
    UpdateResultRequest,
    'body',
    { ...good, status: 'done' },
    [
      {
        type: 'literal_error',
        loc: ['body', 'status'],
        msg: "Input should be 'success' or 'error'",
        input: 'done',
        ctx: { expected: "'success' or 'error'" },
      },
    ],
  ],
  [
    'status of another type',
    UpdateResultRequest,
    'body',
    { ...good, status: 1 },
    [
      {
        type: 'literal_error',
        loc: ['body', 'status'],
        msg: "Input should be 'success' or 'error'",
        input: 1,
        ctx: { expected: "'success' or 'error'" },
      },
    ],
  ],
  [
    'last_days "abc"',
    DailyPointsRequest,
    'body',
    { ...goodPoints, last_days: 'abc' },
    [{ type: 'int_parsing', loc: ['body', 'last_days'], msg: 'Input should be a valid integer, unable to parse string as an integer', input: 'abc' }],
  ],
  [
    'last_days 2.5',
    DailyPointsRequest,
    'body',
    { ...goodPoints, last_days: 2.5 },
    [{ type: 'int_from_float', loc: ['body', 'last_days'], msg: 'Input should be a valid integer, got a number with a fractional part', input: 2.5 }],
  ],
  [
    'last_days 0',
    DailyPointsRequest,
    'body',
    { ...goodPoints, last_days: 0 },
    [{ type: 'greater_than_equal', loc: ['body', 'last_days'], msg: 'Input should be greater than or equal to 1', input: 0, ctx: { ge: 1 } }],
  ],
  [
    'last_days 367',
    DailyPointsRequest,
    'body',
    { ...goodPoints, last_days: 367 },
    [{ type: 'less_than_equal', loc: ['body', 'last_days'], msg: 'Input should be less than or equal to 366', input: 367, ctx: { le: 366 } }],
  ],
  [
    'last_days null',
    DailyPointsRequest,
    'body',
    { ...goodPoints, last_days: null },
    [{ type: 'int_type', loc: ['body', 'last_days'], msg: 'Input should be a valid integer', input: null }],
  ],
  [
    'last_days object',
    DailyPointsRequest,
    'body',
    { ...goodPoints, last_days: {} },
    [{ type: 'int_type', loc: ['body', 'last_days'], msg: 'Input should be a valid integer', input: {} }],
  ],
  [
    'missing model_name query',
    UniqueNodesQuery,
    'query',
    {},
    [{ type: 'missing', loc: ['query', 'model_name'], msg: 'Field required', input: null }],
  ],
  ['bad start_date', UniqueNodesQuery, 'query', { model_name: 'm', start_date: 'not-a-date' }, [DT('not-a-date', 'invalid character in year')]],
  ['short start_date', UniqueNodesQuery, 'query', { model_name: 'm', start_date: 'abc' }, [DT('abc', 'input is too short')]],
  [
    'start_date month 13',
    UniqueNodesQuery,
    'query',
    { model_name: 'm', start_date: '2024-13-01' },
    [DT('2024-13-01', 'month value is outside expected range of 1-12')],
  ],
  [
    'start_date day 30 Feb',
    UniqueNodesQuery,
    'query',
    { model_name: 'm', start_date: '2024-02-30' },
    [DT('2024-02-30', 'day value is outside expected range')],
  ],
  [
    'start_date bad time',
    UniqueNodesQuery,
    'query',
    { model_name: 'm', start_date: '2024-01-01T25:00:00' },
    [DT('2024-01-01T25:00:00', 'unexpected extra characters at the end of the input')],
  ],
  [
    'start_date bad separator',
    UniqueNodesQuery,
    'query',
    { model_name: 'm', start_date: '2024/01/01' },
    [DT('2024/01/01', 'invalid date separator, expected `-`')],
  ],
  [
    'empty node_name',
    DailyPointsRequest,
    'body',
    { ...goodPoints, node_name: '' },
    [{ type: 'string_too_short', loc: ['body', 'node_name'], msg: 'String should have at least 1 character', input: '', ctx: { min_length: 1 } }],
  ],
  // Each remaining field of each endpoint.
  [
    'job_id too long',
    UpdateResultRequest,
    'body',
    { ...good, job_id: 'x'.repeat(129) },
    [
      {
        type: 'string_too_long',
        loc: ['body', 'job_id'],
        msg: 'String should have at most 128 characters',
        input: 'x'.repeat(129),
        ctx: { max_length: 128 },
      },
    ],
  ],
  [
    'empty job_id',
    UpdateResultRequest,
    'body',
    { ...good, job_id: '' },
    [{ type: 'string_too_short', loc: ['body', 'job_id'], msg: 'String should have at least 1 character', input: '', ctx: { min_length: 1 } }],
  ],
  [
    'api_key not a string',
    UpdateResultRequest,
    'body',
    { ...good, api_key: null },
    [{ type: 'string_type', loc: ['body', 'api_key'], msg: 'Input should be a valid string', input: null }],
  ],
  [
    'model_name too long',
    UpdateResultRequest,
    'body',
    { ...good, model_name: 'm'.repeat(257) },
    [
      {
        type: 'string_too_long',
        loc: ['body', 'model_name'],
        msg: 'String should have at most 256 characters',
        input: 'm'.repeat(257),
        ctx: { max_length: 256 },
      },
    ],
  ],
  [
    'model_name bool',
    UpdateResultRequest,
    'body',
    { ...good, model_name: true },
    [{ type: 'string_type', loc: ['body', 'model_name'], msg: 'Input should be a valid string', input: true }],
  ],
  [
    'node_name number',
    DailyPointsRequest,
    'body',
    { ...goodPoints, node_name: 7 },
    [{ type: 'string_type', loc: ['body', 'node_name'], msg: 'Input should be a valid string', input: 7 }],
  ],
  [
    'node_name too long',
    DailyPointsRequest,
    'body',
    { ...goodPoints, node_name: 'n'.repeat(129) },
    [
      {
        type: 'string_too_long',
        loc: ['body', 'node_name'],
        msg: 'String should have at most 128 characters',
        input: 'n'.repeat(129),
        ctx: { max_length: 128 },
      },
    ],
  ],
  [
    'empty model_name query',
    UniqueNodesQuery,
    'query',
    { model_name: '' },
    [{ type: 'string_too_short', loc: ['query', 'model_name'], msg: 'String should have at least 1 character', input: '', ctx: { min_length: 1 } }],
  ],
  [
    'bad end_date',
    UniqueNodesQuery,
    'query',
    { model_name: 'm', end_date: 'soon' },
    [{ ...DT('soon', 'input is too short'), loc: ['query', 'end_date'] }],
  ],
  // Text PostgreSQL cannot store, and dates Python cannot represent (deliberate differences).
  [
    'NUL in job_id',
    UpdateResultRequest,
    'body',
    { ...good, job_id: 'a\u0000b' },
    [
      {
        type: 'value_error',
        loc: ['body', 'job_id'],
        msg: 'Value error, text with the NUL character (\\u0000) or an unpaired surrogate cannot be stored',
        input: 'a\u0000b',
        ctx: { error: {} },
      },
    ],
  ],
  [
    'unpaired surrogate deep in result',
    UpdateResultRequest,
    'body',
    { ...good, result: { a: [{ b: '\ud800' }] } },
    [
      {
        type: 'value_error',
        loc: ['body', 'result'],
        msg: 'Value error, text with the NUL character (\\u0000) or an unpaired surrogate cannot be stored',
        input: { a: [{ b: '\ud800' }] },
        ctx: { error: {} },
      },
    ],
  ],
  [
    'timestamp before year 1',
    UniqueNodesQuery,
    'query',
    { model_name: 'm', start_date: '-99999999999999' },
    [DT('-99999999999999', 'value is outside expected range')],
  ],
  // All failures at once, in field order.
  [
    'every field wrong',
    UpdateResultRequest,
    'body',
    { job_id: 1, api_key: 2, model_name: '', result: 3, status: 'ok' },
    [
      { type: 'string_type', loc: ['body', 'job_id'], msg: 'Input should be a valid string', input: 1 },
      { type: 'string_type', loc: ['body', 'api_key'], msg: 'Input should be a valid string', input: 2 },
      { type: 'string_too_short', loc: ['body', 'model_name'], msg: 'String should have at least 1 character', input: '', ctx: { min_length: 1 } },
      { type: 'dict_type', loc: ['body', 'result'], msg: 'Input should be a valid dictionary', input: 3 },
      {
        type: 'literal_error',
        loc: ['body', 'status'],
        msg: "Input should be 'success' or 'error'",
        input: 'ok',
        ctx: { expected: "'success' or 'error'" },
      },
    ],
  ],
  [
    'empty body object',
    DailyPointsRequest,
    'body',
    {},
    [
      { type: 'missing', loc: ['body', 'node_name'], msg: 'Field required', input: {} },
      { type: 'missing', loc: ['body', 'last_days'], msg: 'Field required', input: {} },
    ],
  ],
];

describe('pydantic-compatible validation errors', () => {
  it.each(cases)('%s', (_name, schema, part, input, errors) => {
    const r = validatePart(schema, part, input);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.errors).toEqual(errors);
  });
});

describe('pydantic lax coercions that pass', () => {
  it.each([
    ['"7"', '7', 7],
    ['7.0', 7.0, 7],
    ['" 7 "', ' 7 ', 7],
    ['"7.0"', '7.0', 7],
    ['true', true, 1],
    ['366', 366, 366],
    // Python's int() digits, as pydantic 2.13 reads them: underscores between digits, a fraction of zeros.
    ['"1_0"', '1_0', 10],
    ['"+1_0.00"', '+1_0.00', 10],
    ['"0_1"', '0_1', 1],
    ['"\\t7\\n"', '\t7\n', 7],
  ])('last_days %s is %d', (_n, value, expected) => {
    const r = validatePart(DailyPointsRequest, 'body', { ...goodPoints, last_days: value });
    expect(r).toEqual({ ok: true, value: { ...goodPoints, last_days: expected } });
  });

  it('ignores extra fields and keeps any result object', () => {
    const r = validatePart(UpdateResultRequest, 'body', { ...good, result: { message: { role: 'assistant', content: 'x' } }, extra: 1 });
    expect(r).toEqual({ ok: true, value: { ...good, result: { message: { role: 'assistant', content: 'x' } } } });
  });

  it('counts string length in code points, as Python does', () => {
    expect(validatePart(UpdateResultRequest, 'body', { ...good, job_id: '😀'.repeat(128) }).ok).toBe(true);
    expect(validatePart(UpdateResultRequest, 'body', { ...good, job_id: '😀'.repeat(129) }).ok).toBe(false);
  });

  it('takes the last of repeated query parameters and treats empty or null bounds as open', () => {
    const r = validatePart(UniqueNodesQuery, 'query', { model_name: ['a', 'b'], start_date: '', end_date: 'null' });
    expect(r).toEqual({ ok: true, value: { model_name: 'b' } });
  });
});

describe('date-times as pydantic reads them, normalised to UTC', () => {
  it.each([
    ['2024-05-01', '2024-05-01T00:00:00Z'],
    ['2024-05-01T12:30', '2024-05-01T12:30:00Z'],
    ['2024-05-01T12:30:15', '2024-05-01T12:30:15Z'],
    ['2024-05-01 12:30:15.5', '2024-05-01T12:30:15.5Z'],
    ['2024-05-01T12:30:15.123456Z', '2024-05-01T12:30:15.123456Z'],
    ['2024-05-01T12:30:15+02:00', '2024-05-01T10:30:15Z'],
    ['2024-05-01T00:30:00-01:00', '2024-05-01T01:30:00Z'],
    ['2024-05-01T00:30:00+0530', '2024-04-30T19:00:00Z'],
    ['1714521600', '2024-05-01T00:00:00Z'],
  ])('%s → %s', (input, iso) => {
    expect(parseDateTime(input)).toEqual({ ok: true, iso });
  });

  // pydantic 2.13's answers (speedate): an offset has its minutes; a timestamp has no spaces around it.
  it.each([
    ['2024-05-01T12:30:15+05', 'unexpected extra characters at the end of the input'],
    ['2024-05-01T12:30+05', 'unexpected extra characters at the end of the input'],
    [' 1714521600', 'invalid character in year'],
    ['1714521600 ', 'invalid date separator, expected `-`'],
    // speedate reads bytes: a character beyond ASCII is several, none a digit.
    ['\u00e9\u00e9\u00e9\u00e9\u00e9', 'invalid character in year'],
    ['\uff11\uff17\uff10\uff10', 'invalid character in year'],
    ['\u00e9', 'input is too short'],
    ['0000-01-01T25:00:00', 'unexpected extra characters at the end of the input'],
  ])('refuses %j: %s', (input, error) => {
    expect(parseDateTime(input)).toEqual({ ok: false, error });
  });

  it("year 0 is Python datetime's refusal (datetime_parsing), once speedate has read the rest", () => {
    for (const input of ['0000-01-01', '0000-02-29', '0000-01-01T00:00:00Z']) {
      expect(validatePart(UniqueNodesQuery, 'query', { model_name: 'm', start_date: input })).toEqual({
        ok: false,
        errors: [
          {
            type: 'datetime_parsing',
            loc: ['query', 'start_date'],
            msg: 'Input should be a valid datetime, year 0 is out of range',
            input,
            ctx: { error: 'year 0 is out of range' },
          },
        ],
      });
    }
    expect(parseDateTime('0000-02-30')).toEqual({ ok: false, error: 'day value is outside expected range' });
  });
});

describe('numbers in strings as pydantic 2.13 reads them', () => {
  const days = (last_days: unknown) => validatePart(DailyPointsRequest, 'body', { ...goodPoints, last_days });
  it.each(['3.', '1__0', '_10', '10_', '3.0_0', '3e0'])('last_days %j is int_parsing', (v) => {
    expect(days(v)).toEqual({
      ok: false,
      errors: [
        { type: 'int_parsing', loc: ['body', 'last_days'], msg: 'Input should be a valid integer, unable to parse string as an integer', input: v },
      ],
    });
  });

  const wait = (v: string) => validatePart(GetResultQuery, 'query', { wait: v });
  it('reads underscores in a float, and compares "inf" and "nan" with its bounds', () => {
    expect(wait('1_0.5')).toEqual({ ok: true, value: { wait: 10.5 } });
    expect(wait('1_0e0')).toEqual({ ok: true, value: { wait: 10 } });
    for (const v of ['inf', ' Infinity ', 'nan', '+NaN']) {
      expect(wait(v), v).toMatchObject({ ok: false, errors: [{ type: 'less_than_equal', loc: ['query', 'wait'], input: v, ctx: { le: 30 } }] });
    }
    expect(wait('-inf')).toMatchObject({
      ok: false,
      errors: [{ type: 'greater_than_equal', loc: ['query', 'wait'], input: '-inf', ctx: { ge: 0 } }],
    });
    expect(wait('1__0')).toMatchObject({ ok: false, errors: [{ type: 'float_parsing' }] });
  });
});

describe('malformed JSON located as Python json does', () => {
  it.each([
    ['{"a": }', 6, 'Expecting value'],
    ['{', 1, 'Expecting property name enclosed in double quotes'],
    ['{"a" 1}', 5, "Expecting ':' delimiter"],
    ['{"a": 1 "b": 2}', 8, "Expecting ',' delimiter"],
    ['{"a": 1,}', 8, 'Expecting property name enclosed in double quotes'],
    ['{"a": "x', 6, 'Unterminated string starting at'],
    ['{"a": "\\q"}', 7, 'Invalid \\escape'],
    ['{} x', 3, 'Extra data'],
    ['   ', 3, 'Expecting value'],
    ['[1, 2', 5, "Expecting ',' delimiter"],
    ['{"é": x}', 6, 'Expecting value'],
    ['{"😀": x}', 6, 'Expecting value'],
    ['{"a": tru}', 6, 'Expecting value'],
    ['{"a":\n\t-}', 7, 'Expecting value'],
  ])('%j → %d %s', (text, pos, msg) => {
    expect(pythonJsonFailure(text)).toEqual({ pos, msg });
    expect(parseJsonBody(text)).toEqual(new MalformedJson({ pos, msg }));
  });

  it('accepts what Python accepts', () => {
    expect(pythonJsonFailure(' {"a": [1, -2.5e3, true, null, "\\u00e9"]} ')).toBeNull();
  });

  it(`locates errors down to ${MAX_JSON_DEPTH} levels, and refuses deeper documents, well-formed or not, as unparseable (400)`, () => {
    const limit = MAX_JSON_DEPTH;
    expect(pythonJsonFailure(`${'['.repeat(limit)}x`)).toEqual({ pos: limit, msg: 'Expecting value' });
    expect(() => pythonJsonFailure(`${'['.repeat(limit + 1)}x`)).toThrow(JsonTooDeep);
    expect(() => pythonJsonFailure('['.repeat(900_000))).toThrow(JsonTooDeep);
    expect(parseJsonBody(`${'['.repeat(limit)}${']'.repeat(limit)}`)).toHaveLength(1);
    for (const text of [
      `${'['.repeat(limit + 1)}${']'.repeat(limit + 1)}`,
      `${'{"a":'.repeat(limit + 1)}1${'}'.repeat(limit + 1)}`,
      '['.repeat(limit + 1),
    ]) {
      expect(() => parseJsonBody(text)).toThrow(expect.objectContaining({ statusCode: 400, detail: 'There was an error parsing the body' }));
    }
  });
});

describe('text PostgreSQL cannot store, at any depth', () => {
  const deep = (depth: number, leaf: unknown): unknown => JSON.parse(`${'{"a":'.repeat(depth)}${JSON.stringify(leaf)}${'}'.repeat(depth)}`);
  it.each([1, 64, 66, MAX_JSON_DEPTH - 1])('finds a NUL, an unpaired surrogate or a bad key %d levels down in result', (depth) => {
    for (const leaf of ['a\u0000', '\ud800', { 'k\u0000': 1 }, ['ok', '\udc00']]) {
      const r = validatePart(UpdateResultRequest, 'body', { ...good, result: deep(depth, leaf) });
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.errors).toMatchObject([{ type: 'value_error', loc: ['body', 'result'] }]);
    }
    expect(validatePart(UpdateResultRequest, 'body', { ...good, result: deep(depth, ['fine', '😀']) }).ok).toBe(true);
  });
});
