// What every route module receives: the typed Fastify instance and the app's dependencies.
import type { FastifyBaseLogger, FastifyInstance, RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Database } from '../db/database.js';
import type { CoordinatorConfig } from '../config.js';
import type { VerifyConfig } from '../config-verify.js';
import type { Metrics } from '../http/metrics.js';
import type { PrincipalCache } from '../auth/authenticate.js';
import type { KeyLimiters } from '../http/rate-limit.js';
import type { RosterCache } from '../repositories/model-roster.js';
import type { PointsLoader } from '../repositories/points.js';
import type { ResultRecorder } from '../results/recorder.js';
import type { Coordinator } from '../jobs/coordinator.js';

export type App = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, TypeBoxTypeProvider>;

export interface Deps {
  db: Database;
  metrics: Metrics;
  defaultPointsPerJob: number;
  principals: PrincipalCache;
  limiters: KeyLimiters;
  rosters: RosterCache;
  points: PointsLoader;
  results: ResultRecorder;
  coordinator: Coordinator;
  coordinatorConfig: CoordinatorConfig;
  verifyConfig: VerifyConfig;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set once the caller is known, for the request log line. */
    nodeName?: string;
  }
}
