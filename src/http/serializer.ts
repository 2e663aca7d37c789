// Response serialisers: fast-json-stringify, as Fastify's own compiler builds them, but each
// schema compiled once per process rather than once per app. Building them is a quarter of
// what making the app costs (fast-json-stringify generates and evaluates code for each of the
// app's 26 response schemas, and checks each schema with Ajv first). A server builds its app
// once, but the tests build hundreds in a process (docs/development.md). The route modules'
// schemas are module constants, so the same object comes back for the same route; a schema
// Fastify or a plugin builds anew is compiled anew, as before. No schema here refers to a
// shared one (`addSchema`), so none needs Fastify's external schemas.
import type { FastifySerializerCompiler } from 'fastify';
import fastJsonStringify from 'fast-json-stringify';

const compiled = new WeakMap<object, (data: unknown) => string>();
let compiles = 0;

/** How many serialisers this process has compiled (test/serializer.test.ts). */
export const serializersCompiled = (): number => compiles;

export const cachedSerializerCompiler: FastifySerializerCompiler<unknown> = ({ schema }) => {
  const key = schema as object;
  let serialize = compiled.get(key);
  if (!serialize) {
    serialize = fastJsonStringify(key);
    compiles++;
    compiled.set(key, serialize);
  }
  return serialize;
};
