// The Fastify context the OpenAI-compatible routes run in (openai/index.ts registers it): its
// own error handler and server-sent events. A module of its own so that the routes and their
// registration do not import each other.
import type { FastifyInstance } from 'fastify';

export type OpenAIApp = FastifyInstance;
