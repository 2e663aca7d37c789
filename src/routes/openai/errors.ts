// Errors of the OpenAI-compatible API in OpenAI's shape, `{"error": {"message", "type",
// "param", "code"}}`, with the status codes OpenAI uses, so the official SDKs raise their usual
// classes (BadRequestError, AuthenticationError, NotFoundError, RateLimitError, ...). The routes
// of openai/ render every error this way (their own error handler); the rest of the service
// keeps FastAPI's `{"detail"}`.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { HttpError } from '../../http/http-error.js';
import { isUnavailable } from '../../db/errors.js';
import { QuotaExceeded, ReserveOverQuota } from '../../jobs/submit.js';
import { ContextTooLong } from '../../jobs/context.js';

export class OpenAIError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  body(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export const invalidRequest = (message: string, param: string | null, code: string | null = null): OpenAIError =>
  new OpenAIError(400, message, 'invalid_request_error', param, code);

/** The service's own errors (authentication, rate limits, body size, database) in OpenAI's words. */
export function toOpenAIError(err: unknown, body?: unknown): OpenAIError {
  if (err instanceof OpenAIError) return err;
  // A used-up budget is OpenAI's insufficient_quota (429, as OpenAI answers it), not a rate limit.
  // x-should-retry: false, since the SDKs retry a 429 after its Retry-After without a cap: here
  // the hours to 00:00 UTC, twice, with the application hanging meanwhile (openai-node).
  if (err instanceof QuotaExceeded) {
    return new OpenAIError(
      429,
      `You exceeded your current quota: ${err.message}. GET /usage shows it.`,
      'insufficient_quota',
      null,
      'insufficient_quota',
      { 'retry-after': String(err.retryAfterSeconds), 'x-should-retry': 'false' },
    );
  }
  // A job its key's whole token quota cannot hold: retrying never helps, so not a 429.
  // The parameter to lower: max_completion_tokens where the request set it (it wins), else max_tokens,
  // which is also what a request that set neither should set (an outside probe read param null).
  if (err instanceof ReserveOverQuota) return invalidRequest(err.message, maxTokensParam(body), 'max_tokens_over_quota');
  // Longer than every online node's context (jobs/context.ts): OpenAI's own answer to a prompt over the model's context.
  if (err instanceof ContextTooLong) return invalidRequest(err.message, 'messages', 'context_length_exceeded');
  if (err instanceof HttpError) {
    switch (err.statusCode) {
      case 401:
        return err.detail === 'Not authenticated'
          ? new OpenAIError(
              401,
              "You didn't provide an API key. You need to provide your user key (uk_…) in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
              'invalid_request_error',
            )
          : new OpenAIError(
              401,
              'Incorrect API key provided. A user key (uk_…) is made with `ins key add-user LABEL`.',
              'invalid_request_error',
              null,
              'invalid_api_key',
            );
      case 403:
        return new OpenAIError(403, err.detail, 'permission_error', null, 'permission_denied');
      case 413:
        return new OpenAIError(413, err.detail, 'invalid_request_error', null, 'request_too_large');
      case 429:
        return new OpenAIError(429, err.detail, 'requests', null, 'rate_limit_exceeded', err.headers);
      case 503:
        return new OpenAIError(503, 'The service is temporarily unavailable; retry shortly.', 'server_error', null, 'service_unavailable');
      default:
        return new OpenAIError(err.statusCode, err.detail, err.statusCode >= 500 ? 'server_error' : 'invalid_request_error');
    }
  }
  if (isUnavailable(err)) return toOpenAIError(new HttpError(503, 'unavailable'));
  const status = (err as FastifyError).statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    return status === 413
      ? toOpenAIError(new HttpError(413, 'Request body is too large'))
      : new OpenAIError(status, 'The request could not be read.', 'invalid_request_error');
  }
  return new OpenAIError(500, 'The server had an error while processing your request.', 'server_error');
}

/** A client that hung up before its answer: the socket is gone, so no access line follows (onResponse needs a finished response), and this one says it. */
export function logClientClosed(req: FastifyRequest): void {
  req.log.info({ method: req.method, route: req.routeOptions.url, status: 499 }, 'client closed request');
}

const maxTokensParam = (body: unknown): string =>
  typeof body === 'object' && body !== null && (body as Record<string, unknown>).max_completion_tokens != null
    ? 'max_completion_tokens'
    : 'max_tokens';

export function openAIErrorHandler(err: Error, req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const e = toOpenAIError(err, req.body);
  if (e.status >= 500)
    req.log[e.status === 500 ? 'error' : 'warn']({ err: { message: err.message, code: (err as FastifyError).code } }, 'openai api error');
  else if (e.status === 499) logClientClosed(req);
  return reply.code(e.status).headers(e.headers).send(e.body());
}

/** OpenAI's answer to a path it does not serve: 404 invalid_request_error, "Invalid URL (METHOD /path)". */
export function openAINotFound(req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const path = req.url.split('?')[0]!;
  return reply.code(404).send(new OpenAIError(404, `Invalid URL (${req.method} ${path})`, 'invalid_request_error').body());
}
