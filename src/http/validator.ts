// Plugs the pydantic-compatible validator into Fastify: the generated TypeBox schemas are the
// route schemas, and a failure becomes a RequestValidationError that http/errors.ts renders
// as FastAPI's 422 body.
import type { FastifySchemaCompiler } from 'fastify';
import { validatePart, type HttpPart, type PydanticError } from '../validation/pydantic.js';

export class RequestValidationError extends Error {
  readonly statusCode = 422;
  constructor(readonly errors: PydanticError[]) {
    super('Request validation failed');
  }
}

const PARTS: Record<string, HttpPart> = { body: 'body', querystring: 'query', headers: 'header', params: 'path' };

export const pydanticValidatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  const part = PARTS[httpPart ?? 'body'] ?? 'body';
  return (data: unknown) => {
    const r = validatePart(schema, part, data);
    return r.ok ? { value: r.value } : { error: new RequestValidationError(r.errors) };
  };
};
