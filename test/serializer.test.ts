// Response serialisers are compiled once per schema per process (src/http/serializer.ts): a
// second app compiles none, and answers byte for byte as the first.
import { describe, expect, it } from 'vitest';
import fastJsonStringify from 'fast-json-stringify';
import { cachedSerializerCompiler, serializersCompiled } from '../src/http/serializer.js';
import { startApp } from './helpers/app.js';
import { backends } from './helpers/db.js';

const compile = (schema: object) => cachedSerializerCompiler({ schema, method: 'GET', url: '/x', httpStatus: '200' });

describe('response serialisers', () => {
  it("are fast-json-stringify's, one per schema object", () => {
    const schema = { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'string' } }, required: ['a'] };
    const first = compile(schema);
    expect(compile(schema)).toBe(first);
    expect(compile({ ...schema })).not.toBe(first);
    const value = { a: 7.6, b: 'x"y', c: 'dropped' };
    expect(first(value)).toBe(fastJsonStringify(schema as Parameters<typeof fastJsonStringify>[0])(value));
  });

  it('a second app compiles none and answers the same bytes', async () => {
    const backend = backends[0]!;
    const one = await startApp(backend);
    const before = serializersCompiled();
    const two = await startApp(backend);
    try {
      expect(serializersCompiled() - before).toBe(0);
      for (const app of [one, two]) await app.addReader();
      const answers = await Promise.all(
        [one, two].map(async (a) => {
          const res = await a.app.inject({ method: 'GET', url: '/total_job_count' });
          return [res.statusCode, res.body];
        }),
      );
      expect(answers[0]![0]).toBe(200);
      expect(answers[1]).toEqual(answers[0]);
    } finally {
      await one.close();
      await two.close();
    }
  }, 60_000);
});
