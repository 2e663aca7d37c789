// The OpenAI-compatible API, in a context of its own: its errors are OpenAI's
// (openai/errors.ts), its bodies are read as OpenAI reads them (openai/request.ts), and
// streaming uses @fastify/sse (heartbeat comments keep idle streams open through proxies).
import fastifySseModule, { type SSEPluginOptions } from '@fastify/sse';
import type { FastifyPluginAsync } from 'fastify';
import type { App, Deps } from '../types.js';
import { openAIErrorHandler, openAINotFound } from './errors.js';
import { chatCompletionRoutes } from './chat-completions.js';
import { completionsRoutes } from './completions.js';
import { embeddingsRoutes } from './embeddings.js';
import { modelRoutes, ServedModels } from './models.js';

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
    modelRoutes(scope, served);
  });
  // Any other /v1 path (and any method) is OpenAI's 404, as api.openai.com answers it, so the
  // SDKs show the message rather than "404 status code (no body)". A not-found handler of the
  // /v1 prefix, not a list: routes added to /v1 later are found before it. (CORS, preflights
  // included, is http/cors.ts, at the root.)
  await app.register((v1, _opts, done) => { v1.setNotFoundHandler(openAINotFound); done(); }, { prefix: '/v1' });
}
