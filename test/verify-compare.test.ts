// Answers compared by their kind (src/verify/compare.ts): tool calls by name and canonical
// arguments in any order, JSON answers as parsed values checked against the schema's required
// keys, embeddings by cosine similarity; and the verdict built on it (rules.ts).
import { describe, expect, it } from 'vitest';
import { compare, cosine, decodeVector, deterministic, kindOf, MIN_COSINE, type AnswerKind } from '../src/verify/compare.js';
import { verdict } from '../src/verify/rules.js';
import { rng } from '../scripts/tiny-gguf.js'; // mulberry32: the same numbers every run

const T = 0.5;
const call = (name: string, args: unknown, id = 'call_1') => ({
  id,
  type: 'function',
  function: { name, arguments: typeof args === 'string' ? args : JSON.stringify(args) },
});
const TOOLS: AnswerKind = { kind: 'tools' };
const vector = (xs: number[]) => {
  const b = Buffer.alloc(xs.length * 4);
  xs.forEach((x, i) => b.writeFloatLE(x, i * 4));
  return b.toString('base64');
};
const randomVector = (r: () => number, n: number) => Array.from({ length: n }, () => r() * 2 - 1);

describe('the kind of answer a request asks for', () => {
  it('reads it from the parameters', () => {
    expect(kindOf(undefined)).toEqual({ kind: 'text' });
    expect(kindOf({ temperature: 0 })).toEqual({ kind: 'text' });
    expect(kindOf({ tools: [{ type: 'function', function: { name: 'f' } }] })).toEqual({ kind: 'tools' });
    expect(kindOf({ response_format: { type: 'json_object' } })).toEqual({ kind: 'json' });
    const schema = { type: 'object', required: ['a'] };
    expect(kindOf({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } })).toEqual({ kind: 'json', schema });
    expect(kindOf({ input: ['a'] })).toEqual({ kind: 'embeddings' });
    expect(kindOf({ prompt: 'Once upon' })).toEqual({ kind: 'text' });
  });

  it('copies embeddings jobs whatever their temperature, other jobs at temperature 0 only', () => {
    expect(deterministic({ temperature: 1, params: { input: ['a'] } })).toBe(true);
    expect(deterministic({ temperature: 0 })).toBe(true);
    expect(deterministic({ temperature: 1, params: { tools: [] } })).toBe(false);
  });
});

describe('tool calls', () => {
  const a = { content: '', tool_calls: [call('get_weather', { city: 'Paris', unit: 'c', when: { day: 1, hour: 9 } })] };
  it('agree by name and arguments, whatever the key order, whitespace and call ids', () => {
    const b = { content: '', tool_calls: [call('get_weather', '{ "when": {"hour": 9, "day": 1}, "unit": "c",\n "city": "Paris" }', 'call_other')] };
    expect(compare(a, b, TOOLS, T).same).toBe(true);
  });
  it('agree on parallel calls in another order, and on arguments sent as an object', () => {
    const x = { content: '', tool_calls: [call('f', { n: 1 }), call('g', { s: 'x' })] };
    const y = { content: '', tool_calls: [{ function: { name: 'g', arguments: { s: 'x' } } }, call('f', { n: 1 })] };
    expect(compare(x, y, TOOLS, T).same).toBe(true);
  });
  it('disagree on other arguments, another function, a missing call, or text instead of calls', () => {
    expect(
      compare(a, { content: '', tool_calls: [call('get_weather', { city: 'Lyon', unit: 'c', when: { day: 1, hour: 9 } })] }, TOOLS, T).same,
    ).toBe(false);
    expect(compare(a, { content: '', tool_calls: [call('get_time', { city: 'Paris', unit: 'c', when: { day: 1, hour: 9 } })] }, TOOLS, T).same).toBe(
      false,
    );
    expect(compare({ content: '', tool_calls: [...a.tool_calls, call('f', {})] }, a, TOOLS, T).same).toBe(false);
    expect(compare(a, { content: 'The weather in Paris is mild.' }, TOOLS, T)).toEqual({ same: false, score: 0 });
    expect(compare({ content: 'The weather in Paris is mild.' }, a, TOOLS, T).same).toBe(false);
  });
  it('compares two text answers to a tools job as text', () => {
    expect(compare({ content: 'It is sunny in Paris today' }, { content: 'it is  sunny in paris today' }, TOOLS, T).same).toBe(true);
    expect(compare({ content: 'It is sunny in Paris today' }, { content: 'Bananas are yellow fruit' }, TOOLS, T).same).toBe(false);
  });
  it('compares unparsable arguments as their text', () => {
    expect(compare({ content: '', tool_calls: [call('f', '{oops')] }, { content: '', tool_calls: [call('f', ' {oops ')] }, TOOLS, T).same).toBe(true);
    expect(compare({ content: '', tool_calls: [call('f', '{oops')] }, { content: '', tool_calls: [call('f', '{oops!')] }, TOOLS, T).same).toBe(false);
  });
});

describe('JSON answers', () => {
  const JSON_KIND: AnswerKind = { kind: 'json' };
  const schema = { type: 'object', required: ['name', 'age', 'address'], properties: { address: { type: 'object', required: ['city'] } } };
  const SCHEMA_KIND: AnswerKind = { kind: 'json', schema };
  const j = (content: string) => ({ content });
  it('agree with keys reordered, whitespace aside, numbers within float noise', () => {
    expect(compare(j('{"name":"Ann","age":31,"score":0.1}'), j('{ "score": 0.10000000001, "age": 31, "name": "Ann" }'), JSON_KIND, T).same).toBe(
      true,
    );
  });
  it('disagree on a different value, a missing or extra key, or arrays in another order', () => {
    expect(compare(j('{"name":"Ann","age":31}'), j('{"name":"Ann","age":32}'), JSON_KIND, T).same).toBe(false);
    expect(compare(j('{"name":"Ann","age":31}'), j('{"name":"Bob","age":31}'), JSON_KIND, T).same).toBe(false);
    expect(compare(j('{"name":"Ann","age":31}'), j('{"name":"Ann"}'), JSON_KIND, T).same).toBe(false);
    expect(compare(j('{"a":[1,2]}'), j('{"a":[2,1]}'), JSON_KIND, T).same).toBe(false);
    expect(compare(j('{"a":1}'), j('{"a":"1"}'), JSON_KIND, T).same).toBe(false);
  });
  it('a job with tools and JSON output compares tool calls as calls', () => {
    const c = { content: '', tool_calls: [call('f', { a: 1 })] };
    expect(compare(c, { content: '', tool_calls: [call('f', '{"a":1}')] }, JSON_KIND, T).same).toBe(true);
    expect(compare(c, j('{"a":1}'), JSON_KIND, T).same).toBe(false);
  });
  it('compares long strings inside as free text', () => {
    const s = 'the lighthouse keeper climbed the narrow stairs every night to light the lamp';
    const t = 'the lighthouse keeper climbed the narrow stairs each night to light the old lamp';
    expect(compare(j(JSON.stringify({ story: s })), j(JSON.stringify({ story: t })), JSON_KIND, T).same).toBe(true);
    expect(
      compare(
        j(JSON.stringify({ story: s })),
        j(JSON.stringify({ story: 'bananas are yellow and grow in warm places all year round' })),
        JSON_KIND,
        T,
      ).same,
    ).toBe(false);
  });
  it('an answer that does not parse, or misses the schema, is wrong: it agrees with nothing, not even itself', () => {
    expect(compare(j('not json'), j('not json'), JSON_KIND, T).same).toBe(false);
    expect(
      compare(j('{"name":"Ann","age":31,"address":{"city":"Oslo"}}'), j('{"age":31,"address":{"city":"Oslo"},"name":"Ann"}'), SCHEMA_KIND, T).same,
    ).toBe(true);
    expect(compare(j('{"name":"Ann","age":31}'), j('{"name":"Ann","age":31}'), SCHEMA_KIND, T).same).toBe(false);
    expect(compare(j('{"name":"Ann","age":31,"address":{}}'), j('{"name":"Ann","age":31,"address":{}}'), SCHEMA_KIND, T).same).toBe(false);
    expect(compare(j('[1]'), j('[1]'), SCHEMA_KIND, T).same).toBe(false);
  });
});

describe('embeddings', () => {
  const E: AnswerKind = { kind: 'embeddings' };
  const r = rng(28);
  const base = [randomVector(r, 384), randomVector(r, 384)];
  it('decode as little-endian float32s', () => {
    expect([...decodeVector(vector([1, -2.5]))!]).toEqual([1, -2.5]);
    expect(decodeVector('abc')).toBeUndefined();
    expect(cosine(new Float32Array([1, 0]), new Float32Array([0, 1]))).toBe(0);
  });
  it(`agree under float noise (cosine ≥ ${MIN_COSINE}), disagree with another vector, a wrong dimension or count`, () => {
    const noisy = base.map((v) => v.map((x) => x + (r() - 0.5) * 0.01));
    expect(compare({ content: '', embeddings: base.map(vector) }, { content: '', embeddings: noisy.map(vector) }, E, T).same).toBe(true);
    const other = [base[0]!, randomVector(r, 384)];
    const c = compare({ content: '', embeddings: base.map(vector) }, { content: '', embeddings: other.map(vector) }, E, T);
    expect(c.same).toBe(false);
    expect(c.score).toBeLessThan(0.3);
    expect(
      compare({ content: '', embeddings: base.map(vector) }, { content: '', embeddings: base.map((v) => vector(v.slice(0, 256))) }, E, T).same,
    ).toBe(false);
    expect(compare({ content: '', embeddings: base.map(vector) }, { content: '', embeddings: [vector(base[0]!)] }, E, T).same).toBe(false);
    expect(compare({ content: '', embeddings: base.map(vector) }, { content: '' }, E, T).same).toBe(false);
  });
});

describe('the verdict by kind', () => {
  const honest = (id: string, nodeId: number) => ({ id, nodeId, content: '', tool_calls: [call('f', { a: 1, b: [1, 2] })] });
  it('two tool answers with reordered arguments agree; a text answer is the odd one out among three', () => {
    expect(verdict([honest('o', 1), { ...honest('c', 2), tool_calls: [call('f', '{"b":[1,2],"a":1}')] }], T, TOOLS).kind).toBe('agree');
    const liar = { id: 'o', nodeId: 1, content: 'I would call f with a equal to one.' };
    expect(verdict([liar, honest('c', 2)], T, TOOLS).kind).toBe('third');
    const v = verdict([liar, honest('c', 2), honest('d', 3)], T, TOOLS);
    expect(v).toMatchObject({ kind: 'odd', odd: { id: 'o' }, similarity: 0 });
  });
  it('plain text answers are judged as before when no kind is given', () => {
    expect(
      verdict(
        [
          { id: 'a', nodeId: 1, content: 'The sky is blue' },
          { id: 'b', nodeId: 2, content: 'the sky is BLUE' },
        ],
        T,
      ).kind,
    ).toBe('agree');
  });
});
