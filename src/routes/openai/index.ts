// The OpenAI-compatible API, in a context of its own: its errors are OpenAI's
// (openai/errors.ts), its bodies are read as OpenAI reads them (openai/request.ts), and
// streaming uses @fastify/sse (heartbeat comments keep idle streams open through proxies).
import fastifySseModule, { type SSEPluginOptions } from '@fastify/sse';
import type { FastifyPluginAsync } from 'fastify';
import type { App, Deps } from '../types.js';
import { openAIErrorHandler } from './errors.js';
import { chatCompletionRoutes } from './chat-completions.js';
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
    modelRoutes(scope, served);
  });
}
