// The /v1 API: the OpenAI-compatible routes in a context of their own — their errors are
// OpenAI's (openai/errors.ts), their bodies are read as OpenAI reads them (openai/request.ts) —
// and Anthropic's Messages API in another (anthropic/errors.ts). Streaming uses @fastify/sse
// (heartbeat comments keep idle streams open through proxies).
import fastifySseModule, { type SSEPluginOptions } from '@fastify/sse';
import type { FastifyPluginAsync } from 'fastify';
import type { App, Deps } from '../types.js';
import { openAIErrorHandler, openAINotFound } from './errors.js';
import { chatCompletionRoutes } from './chat-completions.js';
import { completionsRoutes } from './completions.js';
import { embeddingsRoutes } from './embeddings.js';
import { modelRoutes, ServedModels } from './models.js';
import { responsesRoutes } from './responses.js';
import { anthropicErrorHandler } from '../anthropic/errors.js';
import { messagesRoutes } from '../anthropic/messages.js';
import { authenticateKey } from '../authenticate.js';

// The package is CommonJS: its module object is the fastify-plugin-wrapped plugin (which
// decorates the registering context), while its types describe the module as an ES namespace.
const fastifySse = fastifySseModule as unknown as FastifyPluginAsync<SSEPluginOptions>;

/** Keep-alive comments while a streamed completion waits for its node. */
export const SSE_HEARTBEAT_MS = 15_000;

export async function openAIRoutes(app: App, deps: Deps): Promise<void> {
  const served = new ServedModels(deps.service.db, deps.service.options.coordinator);
  await app.register(async (scope) => {
    scope.setErrorHandler(openAIErrorHandler);
    await scope.register(fastifySse, { heartbeatInterval: SSE_HEARTBEAT_MS });
    chatCompletionRoutes(scope, deps, served);
    completionsRoutes(scope, deps, served);
    embeddingsRoutes(scope, deps, served);
    responsesRoutes(scope, deps, served);
    modelRoutes(scope, served);
  });
  await app.register(async (scope) => {
    scope.setErrorHandler(anthropicErrorHandler);
    await scope.register(fastifySse, { heartbeatInterval: SSE_HEARTBEAT_MS });
    messagesRoutes(scope, deps, served);
  });
  // Any other /v1 path (and any method) is OpenAI's 404, as api.openai.com answers it, so the
  // SDKs show the message rather than "404 status code (no body)". A not-found handler of the
  // /v1 prefix, not a list: routes added to /v1 later are found before it. The key is checked
  // first, as OpenAI does: a made-up key gets 401 on every /v1 path, and no path tells a caller
  // without a key what is served. A preflight (OPTIONS) carries no key by design: not asked for
  // one. (CORS, preflights included, is http/cors.ts, at the root.)
  await app.register(
    (v1, _opts, done) => {
      v1.setErrorHandler(openAIErrorHandler);
      v1.setNotFoundHandler(async (req, reply) => {
        if (req.method !== 'OPTIONS') await authenticateKey(deps, req);
        return openAINotFound(req, reply);
      });
      done();
    },
    { prefix: '/v1' },
  );
}
