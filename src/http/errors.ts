// Every error leaves as JSON with `detail`, in FastAPI's shapes: 422 with the pydantic list,
// 404 "Not Found", 405 "Method Not Allowed" (with Allow), 413 for an oversized body, 503 when
// the database is away, and a 500 that says nothing about the cause (the log does).
import { STATUS_CODES } from 'node:http';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { HttpError } from './http-error.js';
import { isDataException, isUnavailable } from '../db/errors.js';
import { RequestValidationError } from './validator.js';
import { valueError } from '../validation/pydantic.js';

function fastifyClientError(err: FastifyError): HttpError | undefined {
  const status = err.statusCode;
  if (status === undefined || status < 400 || status >= 500) return undefined;
  if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return new HttpError(413, 'Request body is too large');
  // Other framework-level client errors (bad URL, bad header...): a fixed phrase per status,
  // never the internal message.
  return new HttpError(status, STATUS_CODES[status] ?? 'Bad Request');
}

/** The HTTP error for a database failure, or undefined when it is a genuine bug (500). */
function httpErrorForDatabase(err: unknown): HttpError | undefined {
  if (isUnavailable(err)) return new HttpError(503, 'Database unavailable, retry later');
  return undefined;
}

export function registerErrorHandlers(app: FastifyInstance): void {
  // Paths and their methods, for telling 405 from 404.
  const methodsByPath = new Map<string, Set<string>>();
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    const set = methodsByPath.get(route.url) ?? new Set<string>();
    for (const m of methods) set.add(m);
    methodsByPath.set(route.url, set);
  });

  app.setNotFoundHandler((req: FastifyRequest, reply: FastifyReply) => {
    const path = req.url.split('?')[0]!;
    const allowed = methodsByPath.get(path);
    if (allowed && !allowed.has(req.method)) {
      return reply.code(405).header('allow', [...allowed].sort().join(', ')).send({ detail: 'Method Not Allowed' });
    }
    return reply.code(404).send({ detail: 'Not Found' });
  });

  app.setErrorHandler((err: FastifyError | Error, req: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof RequestValidationError) {
      return reply.code(422).send({ detail: err.errors });
    }
    if (isDataException(err)) {
      // Validation should have caught it; the request is still at fault, not the service.
      req.log.warn({ err: { message: err.message, code: (err as FastifyError).code } }, 'value refused by the database');
      return reply.code(422).send({ detail: [valueError(['body'], 'a value of the request cannot be stored', null)] });
    }
    const known = err instanceof HttpError ? err : (httpErrorForDatabase(err) ?? fastifyClientError(err as FastifyError));
    if (known) {
      if (known.statusCode >= 500) req.log.warn({ err: { message: err.message, code: (err as FastifyError).code } }, 'service unavailable');
      return reply.code(known.statusCode).headers(known.headers).send({ detail: known.detail });
    }
    req.log.error({ err }, 'unhandled error');
    return reply.code(500).send({ detail: 'Internal Server Error' });
  });
}
