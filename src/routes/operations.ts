// Liveness, readiness, metrics, the OpenAPI document and its interactive reference.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { HealthzResponses, ReadyzResponses } from '../generated/schemas.js';
import { sql } from '../db/database.js';
import { HttpError } from '../http/http-error.js';
import { PACKAGE_ROOT } from '../paths.js';
import type { App, Deps } from './types.js';

export const OPENAPI_FILE = path.join(PACKAGE_ROOT, 'openapi.json');
const PING = sql('ping', 'SELECT 1 AS ok');

export async function operationsRoutes(app: App, { service: { db }, metrics }: Deps): Promise<void> {
  // Probes and metrics are never rate limited: an orchestrator must always get an answer.
  const unlimited = { rateLimit: false } as const;
  app.get('/healthz', { config: unlimited, schema: { hide: true, response: HealthzResponses } }, () => Promise.resolve({ status: 'ok' as const }));

  app.get('/readyz', { config: unlimited, schema: { hide: true, response: ReadyzResponses } }, async () => {
    try {
      await db.query(PING);
    } catch {
      throw new HttpError(503, 'Database unavailable');
    }
    return { status: 'ok' };
  });

  app.get('/metrics', { config: unlimited, schema: { hide: true } }, async (_req, reply) => {
    reply.type(metrics.registry.contentType);
    return metrics.registry.metrics();
  });

  // The served document is the file itself, byte for byte.
  const openapiText = readFileSync(OPENAPI_FILE, 'utf8');
  app.get('/openapi.json', { schema: { hide: true } }, async (_req, reply) => reply.type('application/json').send(openapiText));

  await app.register(swagger, { mode: 'static', specification: { document: JSON.parse(openapiText) as never } });
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { docExpansion: 'list', deepLinking: true } });
}
