// Errors of the Anthropic Messages API in Anthropic's shape, `{"type": "error", "error": {"type",
// "message"}}`, with the statuses Anthropic uses, so that its SDKs raise their usual classes
// (BadRequestError, AuthenticationError, NotFoundError, RateLimitError, …) and Claude Code shows
// the message. Every error of the service is first read as the OpenAI-compatible API reads it
// (openai/errors.ts toOpenAIError: keys, limits, quotas, body size, the database), then put in
// these words; the headers (retry-after, x-should-retry) are kept.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { logClientClosed, toOpenAIError, type OpenAIError } from '../openai/errors.js';

export type AnthropicErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'request_too_large'
  | 'rate_limit_error'
  | 'timeout_error'
  | 'api_error'
  | 'overloaded_error';

/** Anthropic's error type for a status. */
export function anthropicType(status: number): AnthropicErrorType {
  switch (status) {
    case 401:
      return 'authentication_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 503:
      return 'overloaded_error';
    case 504:
      return 'timeout_error';
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

export const anthropicBody = (e: OpenAIError) => ({ type: 'error', error: { type: anthropicType(e.status), message: e.message } });

export function anthropicErrorHandler(err: Error, req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const e = toOpenAIError(err, req.body);
  if (e.status >= 500)
    req.log[e.status === 500 ? 'error' : 'warn']({ err: { message: err.message, code: (err as FastifyError).code } }, 'anthropic api error');
  else if (e.status === 499) logClientClosed(req);
  return reply.code(e.status).headers(e.headers).send(anthropicBody(e));
}
