// What every route module receives: the typed Fastify instance and the app's dependencies —
// the service's domain (src/service.ts), the metrics and the rate limits.
import type { FastifyBaseLogger, FastifyInstance, RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Metrics } from '../http/metrics.js';
import type { KeyLimiters } from '../http/rate-limit.js';
import type { Service } from '../service.js';

export type App = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, TypeBoxTypeProvider>;

export interface Deps {
  service: Service;
  metrics: Metrics;
  limiters: KeyLimiters;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set once the caller is known, for the request log line. */
    nodeName?: string;
  }
}
