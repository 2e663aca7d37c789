// Every error leaves as JSON with `detail`, in FastAPI's shapes: 422 with the pydantic list,
// 404 "Not Found", 405 "Method Not Allowed" (with Allow), 413 for an oversized body, 503 when
// the database is away, and a 500 that says nothing about the cause (the log does).
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
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

/** A route's path with parameters (`/get_result/:job_id`, `/docs/static/*`) as a pattern of the paths it serves. */
function pathPattern(url: string): RegExp {
  const parts = url
    .split(/(:[A-Za-z0-9_]+|\*)/)
    .map((p) => (p === '*' ? '.*' : p.startsWith(':') ? '[^/]+' : p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
  return new RegExp(`^${parts.join('')}$`);
}

/** A request's URL as its path and its query (with its `?`, or ''). */
function splitUrl(url: string): [string, string] {
  const q = url.indexOf('?');
  return q < 0 ? [url, ''] : [url.slice(0, q), url.slice(q)];
}

export function registerErrorHandlers(app: FastifyInstance): void {
  // Paths and their methods, for telling 405 from 404 as FastAPI does: a path some route serves,
  // asked with a method none of them takes, is 405 — `POST /get_result/abc` as much as
  // `GET /worker/update_result`. Static paths by name, those with parameters by pattern.
  const methodsByPath = new Map<string, Set<string>>();
  const patterns = new Map<string, { pattern: RegExp; methods: Set<string> }>();
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    const parameterised = /[:*]/.test(route.url);
    const set = (parameterised ? patterns.get(route.url)?.methods : methodsByPath.get(route.url)) ?? new Set<string>();
    for (const m of methods) set.add(m);
    if (parameterised) patterns.set(route.url, { pattern: pathPattern(route.url), methods: set });
    else methodsByPath.set(route.url, set);
  });
  const methodsFor = (path: string): Set<string> | undefined => {
    const named = methodsByPath.get(path);
    if (named) return named;
    let found: Set<string> | undefined;
    for (const { pattern, methods } of patterns.values()) {
      if (pattern.test(path)) for (const m of methods) (found ??= new Set()).add(m);
    }
    return found;
  };

  // A path some route serves but for a trailing slash (`/unique_nodes/`): 307 to it, query kept,
  // as FastAPI (Starlette's redirect_slashes) answers; a client following it keeps its method and
  // body. The Location is the path alone (RFC 9110 allows it), where Starlette writes the URL
  // from the Host header: behind a proxy that header may not be the client's, and it is theirs
  // to write. Else 404.
  const notFound = (req: FastifyRequest, reply: FastifyReply): FastifyReply => {
    const [path, query] = splitUrl(req.url);
    const bare = path.replace(/\/+$/, '');
    if (bare !== path && bare !== '' && bare.startsWith('/') && !bare.startsWith('//') && methodsFor(bare)) {
      return reply.code(307).header('location', `${bare}${query}`).send();
    }
    return reply.code(404).send({ detail: 'Not Found' });
  };

  // An empty path parameter (`GET /get_result/`) is no path a route serves, as FastAPI's router
  // finds it (its parameters match one character or more): not found — or, where the path without
  // its slash is a route (`/ledger/days/`), its redirect — before any key is looked at.
  app.addHook('onRequest', (req, reply, done) => {
    const params = req.params as Record<string, unknown> | undefined;
    for (const k in params) {
      if (params[k] === '' && k !== '*') {
        void notFound(req, reply);
        return;
      }
    }
    done();
  });

  app.setNotFoundHandler((req: FastifyRequest, reply: FastifyReply) => {
    const [path] = splitUrl(req.url);
    const allowed = methodsFor(path);
    if (allowed && !allowed.has(req.method)) {
      return reply
        .code(405)
        .header('allow', [...allowed].sort().join(', '))
        .send({ detail: 'Method Not Allowed' });
    }
    return notFound(req, reply);
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
    if ((err as NodeJS.ErrnoException).code === 'ECONNRESET' && req.raw.readableAborted) {
      // The client went away while sending its body (Node's 'aborted'): not the database's
      // ECONNRESET, which would be logged as an outage. Nobody reads this answer.
      req.log.info('the client closed the connection before its body arrived');
      return reply.code(400).send({ detail: 'The request body was cut off' });
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

/**
 * Paths no route can serve before routing even starts: a malformed %-escape (`/%zz`,
 * FST_ERR_BAD_URL) or a parameter longer than the router takes (FST_ERR_MAX_PARAM_LENGTH).
 * Fastify would answer these with its own body (no `detail`, the path echoed back); they are
 * 404 `{"detail": "Not Found"}`, as FastAPI answers a path it does not serve. `notFound` answers
 * instead where a prefix has its own 404 (OpenAI's under /v1).
 */
export function frameworkErrorHandler(notFound: (req: FastifyRequest, reply: FastifyReply) => FastifyReply | undefined) {
  return (_err: FastifyError, req: FastifyRequest, reply: FastifyReply): void => {
    if (notFound(req, reply) === undefined) void reply.code(404).send({ detail: 'Not Found' });
  };
}

/**
 * What Node's HTTP parser refuses before there is a request (headers over the limit, a
 * malformed request line, a client too slow to send its headers): the same status Fastify
 * gives, with a JSON body that has `detail` like every other error, and the connection closed.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const status = err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : err.code === 'HPE_HEADER_OVERFLOW' ? 431 : 400;
  const body = JSON.stringify({ detail: STATUS_CODES[status] });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(err);
}
