// buildApp: the whole HTTP service as one Fastify instance, used by the server and by every
// test alike. The server (server.ts) only adds config, logger, signals and listen.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Database } from './db/database.js';
import { parseQuery, registerContentParsers } from './http/content.js';
import { clientErrorHandler, frameworkErrorHandler, registerErrorHandlers } from './http/errors.js';
import { createMetrics, nodeMetrics, outcomeMetrics, recordAudit, type Metrics } from './http/metrics.js';
import { pydanticValidatorCompiler } from './http/validator.js';
import { cachedSerializerCompiler } from './http/serializer.js';
import { registerRateLimits } from './http/rate-limit.js';
import { registerRequestIds, requestId } from './http/request-id.js';
import { registerLingeringClose } from './http/linger.js';
import { isAnsweredPreflight, PREFLIGHT_ROUTE, registerCors } from './http/cors.js';
import {
  DEFAULT_CORS_ORIGINS,
  DEFAULT_COORDINATOR,
  NO_RATE_LIMITS,
  type CoordinatorConfig,
  type CorsOrigins,
  type RateLimits,
  type TrustProxy,
} from './config.js';
import { DEFAULT_VERIFY, type VerifyConfig } from './config-verify.js';
import { Service, type LedgerOptions, type ServiceOptions } from './service.js';
import type { RetentionOptions } from './retention/retention.js';

export type { LedgerOptions } from './service.js';
export type { RetentionOptions } from './retention/retention.js';
import { dailyPointsRoute } from './routes/daily-points.js';
import { operationsRoutes } from './routes/operations.js';
import { dashboardRoutes } from './routes/dashboard.js';
import { uniqueNodesRoute } from './routes/unique-nodes.js';
import { updateResultRoute } from './routes/update-result.js';
import { checkNodeSecretRoute } from './routes/worker/check-node-secret.js';
import { registerNodeRoute } from './routes/worker/register-node.js';
import { updateModelsRoute } from './routes/worker/update-models.js';
import { getJobRoute } from './routes/worker/get-job.js';
import { nextJobsRoute } from './routes/worker/next-jobs.js';
import { deregisterNodeRoute } from './routes/worker/deregister-node.js';
import { jobProgressRoute } from './routes/worker/job-progress.js';
import { jobProgressStreamRoute } from './routes/worker/job-progress-stream.js';
import { getPointsRoute } from './routes/get-points.js';
import { submitJobRoute } from './routes/user/submit-job.js';
import { getResultRoutes } from './routes/user/get-result.js';
import { cancelJobRoute } from './routes/user/cancel-job.js';
import { usageRoute } from './routes/user/usage.js';
import { networkRoutes } from './routes/network.js';
import { openAIRoutes } from './routes/openai/index.js';
import { openAINotFound } from './routes/openai/errors.js';
import type { Deps } from './routes/types.js';
import { ledgerRoutes } from './routes/ledger.js';

export interface AppOptions {
  db: Database;
  logger?: FastifyBaseLogger;
  bodyLimit?: number;
  defaultPointsPerJob?: number;
  /** Process-wide metrics (CPU, memory, event loop); off in tests. */
  processMetrics?: boolean;
  /** Longest time to receive a whole request / only its headers (slow clients are cut off). */
  requestTimeoutMs?: number;
  headersTimeoutMs?: number;
  keepAliveTimeoutMs?: number;
  /** While the server closes, how long a connection answered meanwhile waits for one more request (default 1 s). */
  closingLingerMs?: number;
  /** Off unless given: tests opt in; the server passes the configured limits. */
  rateLimits?: RateLimits;
  /** Behind reverse proxies at these addresses or networks: the client address from X-Forwarded-For, as far as they wrote it. */
  trustProxy?: TrustProxy;
  /** The job coordinator's settings; the defaults of config.ts where absent. */
  coordinator?: Partial<CoordinatorConfig>;
  /** How nodes' answers are checked; the defaults of config.ts where absent. */
  verify?: Partial<VerifyConfig>;
  /** The dispatcher's measurement switches (benchmarks, and a test of the recheck): see ServiceOptions. */
  dispatch?: ServiceOptions['dispatch'];
  /** The points ledger (docs/ledger.md). */
  ledger?: LedgerOptions;
  /** Retention of finished jobs (src/retention/); absent: off. */
  retention?: RetentionOptions;
  /** Seconds between looks of the settler of token usage (src/usage/settle.ts); absent: only when asked. */
  settleEvery?: number;
  /** Origins whose pages may call /v1 (CORS_ORIGINS, http/cors.ts); absent: any ('*'). */
  corsOrigins?: CorsOrigins;
}

export const DEFAULT_BODY_LIMIT = 1024 * 1024;

/**
 * At shutdown, Node closes the keep-alive connections that served a request and are idle, but
 * not those a client opened and never sent a request on (HTTP clients keep spares): the server
 * would wait for them until a timeout. Those carry nothing, so they are closed too; connections
 * with a request in flight are left to finish it. A request that still arrives on an open
 * connection (a client, or nginx's upstream keep-alive, reusing it just after an answer) is
 * served, with `Connection: close` (Fastify adds it while closing), rather than refused with a
 * 503 (`return503OnClosing: false`): the seed's worker stops for
 * hours on a 5xx to its report, and the database stays open until every request has finished
 * (within SHUTDOWN_TIMEOUT_MS, server.ts). So a connection takes at most one more request.
 * A connection whose last request in flight is answered after the close began (a long poll,
 * answered at once when the server stops; a completion; a stream) is kept `lingerMs` for that
 * one more request (a worker's report on the connection its poll came back on), then ended if
 * none came: Node closes idle connections only once, when the close begins, and would otherwise
 * wait for this one until its keep-alive timeout, past SHUTDOWN_TIMEOUT_MS and a container's
 * stop timeout (10 s for docker and podman).
 */
function closeUnusedConnectionsOnClose(app: FastifyInstance, lingerMs: number): void {
  const busy = new Map<Socket, number>();
  let closing = false;
  app.server.on('connection', (socket: Socket) => {
    busy.set(socket, 0);
    socket.once('close', () => busy.delete(socket));
  });
  app.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket;
    busy.set(socket, (busy.get(socket) ?? 0) + 1);
    res.once('close', () => {
      if (!busy.has(socket)) return;
      const n = busy.get(socket)! - 1;
      busy.set(socket, n);
      // end(), not destroy(): the answer already written still reaches the client.
      if (closing && n === 0)
        setTimeout(() => {
          if (busy.get(socket) === 0) socket.end();
        }, lingerMs).unref();
    });
  });
  app.addHook('preClose', (done) => {
    closing = true;
    for (const [socket, n] of busy) if (n === 0) socket.destroy();
    done();
  });
}

export async function buildApp(opts: AppOptions): Promise<FastifyInstance & { metrics: Metrics; service: Service; ledger: Service['ledger'] }> {
  const app = Fastify({
    ...(opts.logger ? { loggerInstance: opts.logger } : { logger: false }),
    bodyLimit: opts.bodyLimit ?? DEFAULT_BODY_LIMIT,
    // One log line per request comes from the onResponse hook below.
    logController: new LogController({ disableRequestLogging: true }),
    requestTimeout: opts.requestTimeoutMs ?? 30_000,
    keepAliveTimeout: opts.keepAliveTimeoutMs ?? 65_000,
    // Slow-header clients (slowloris) are dropped after headersTimeout; Node checks every
    // connectionsCheckingInterval, so that bounds how late.
    http: { headersTimeout: opts.headersTimeoutMs ?? 10_000, connectionsCheckingInterval: Math.min(1_000, opts.headersTimeoutMs ?? 10_000) },
    trustProxy: opts.trustProxy ?? false,
    // Keys travel in headers and bodies; request ids are enough to correlate. The client's own
    // x-request-id is kept only when short and plain (http/request-id.ts), hence genReqId
    // rather than requestIdHeader, which would take any value.
    requestIdHeader: false,
    genReqId: requestId,
    // Requests that arrive while the server closes are served (closeUnusedConnectionsOnClose).
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // A path parameter may be a model's name (256 characters, each up to three when %-encoded:
    // GET /v1/models/{model}); longer ones, and malformed %-escapes, are 404 (http/errors.ts).
    // The query string as Starlette reads it (http/content.ts parseQuery).
    routerOptions: { maxParamLength: 1024, querystringParser: parseQuery },
    frameworkErrors: frameworkErrorHandler((req, reply) => (/^\/v1(\/|$)/.test(req.url) ? openAINotFound(req, reply) : undefined)),
    clientErrorHandler,
  }).withTypeProvider<TypeBoxTypeProvider>();

  const metrics = createMetrics(opts.db, opts.processMetrics ?? false);
  const unobserve = opts.db.observeStatements((name, seconds) => metrics.statements.observe({ statement: name }, seconds));
  app.addHook('onClose', () => {
    unobserve();
    return Promise.resolve();
  });
  app.setValidatorCompiler(pydanticValidatorCompiler);
  app.setSerializerCompiler(cachedSerializerCompiler);
  registerContentParsers(app);
  registerErrorHandlers(app);
  registerRequestIds(app);
  registerLingeringClose(app);

  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? (isAnsweredPreflight(req) ? PREFLIGHT_ROUTE : 'unmatched');
    const status = String(reply.statusCode);
    const seconds = reply.elapsedTime / 1000;
    metrics.requests.inc({ method: req.method, route, status });
    metrics.duration.observe({ method: req.method, route, status }, seconds);
    // No headers, bodies or query values: keys and results never reach the log.
    req.log.info(
      { method: req.method, route, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100, node: req.nodeName },
      'request',
    );
  });

  const limiters = await registerRateLimits(app, opts.rateLimits ?? NO_RATE_LIMITS);
  registerCors(app, opts.corsOrigins ?? DEFAULT_CORS_ORIGINS);
  // The domain, composed apart from HTTP (src/service.ts); the metrics observe it.
  const service = await Service.start(
    opts.db,
    {
      coordinator: { ...DEFAULT_COORDINATOR, ...opts.coordinator },
      verify: { ...DEFAULT_VERIFY, ...opts.verify },
      defaultPointsPerJob: opts.defaultPointsPerJob ?? 1,
      ...(opts.dispatch ? { dispatch: opts.dispatch } : {}),
      ...(opts.ledger ? { ledger: opts.ledger } : {}),
      ...(opts.retention ? { retention: opts.retention } : {}),
      ...(opts.settleEvery ? { settleEvery: opts.settleEvery } : {}),
    },
    {
      outcomes: [outcomeMetrics(metrics)],
      nodeOutcomes: [nodeMetrics(metrics)],
      verification: {
        audited: (report) => {
          recordAudit(metrics, report);
          if (report.setAside.length) app.log.error({ jobs: report.setAside }, 'verification: jobs set aside unaudited, their audit failed');
        },
        probed: (models, canaries) => {
          if (models.length) metrics.verification.inc({ event: 'probe' }, models.length);
          if (canaries.length) metrics.verification.inc({ event: 'canary' }, canaries.length);
        },
        reversed: (points) => metrics.pointsReversed.inc(points),
      },
      ledger: {
        closed: (report) => {
          metrics.ledgerDaysClosed.inc(report.closed.length);
          if (report.closed.length) app.log.info({ days: report.closed, recomputed: report.recomputed }, 'ledger: days closed');
          if (report.disagreements.length)
            app.log.error(
              { disagreements: report.disagreements.slice(0, 20) },
              'ledger: daily_points disagrees with the entries of a day closed now (changed by hand?)',
            );
        },
        error: (err) => {
          metrics.ledgerCloseFailures.inc();
          app.log.error({ err }, 'ledger: closing days failed; retrying at the next look');
        },
        cannotSign: (keyId) =>
          app.log.warn(
            { keyId },
            "ledger: this server has no private key (it lives in another server's LEDGER_KEY_FILE): it serves the ledger but closes no day",
          ),
      },
      retention: {
        pruned: (report) => {
          metrics.retentionPruned.inc({ what: 'jobs' }, report.jobs);
          metrics.retentionPruned.inc({ what: 'leases' }, report.leases);
          metrics.retentionPruned.inc({ what: 'results' }, report.results);
          for (const what of ['usage', 'lanes', 'sessions'] as const) metrics.retentionPruned.inc({ what }, report[what]);
          metrics.retentionPruned.inc({ what: 'token_checks' }, report.tokenChecks);
          metrics.retentionPruned.inc({ what: 'canaries' }, report.canaries);
          app.log.info(
            report,
            'retention: finished jobs past JOB_RETENTION deleted, report bodies replaced by their hash, stale counters and sessions deleted',
          );
        },
        error: (err) => {
          metrics.backgroundFailures.inc({ task: 'retention' });
          app.log.error({ err }, 'retention: pruning failed; retrying at the next look');
        },
      },
      warn: (err, what) => app.log.warn({ err }, what),
      error: (err, where) => {
        metrics.backgroundFailures.inc({ task: where });
        app.log.error({ err }, where);
      },
    },
  );
  metrics.live.waitingWorkers = () => service.coordinator.waitingWorkers;
  // Waiting polls answer at once when the server stops, rather than holding the shutdown.
  app.addHook('preClose', (done) => {
    service.drain();
    done();
  });
  closeUnusedConnectionsOnClose(app, opts.closingLingerMs ?? 1_000);
  app.addHook('onClose', () => service.close());
  const deps: Deps = { service, metrics, limiters };
  updateResultRoute(app, deps);
  uniqueNodesRoute(app, deps);
  dailyPointsRoute(app, deps);
  checkNodeSecretRoute(app, deps);
  registerNodeRoute(app, deps);
  updateModelsRoute(app, deps);
  getJobRoute(app, deps);
  nextJobsRoute(app, deps);
  deregisterNodeRoute(app, deps);
  jobProgressRoute(app, deps);
  jobProgressStreamRoute(app, deps);
  getPointsRoute(app, deps);
  submitJobRoute(app, deps);
  getResultRoutes(app, deps);
  cancelJobRoute(app, deps);
  usageRoute(app, deps);
  networkRoutes(app, deps);
  ledgerRoutes(app, deps);
  await openAIRoutes(app, deps);
  await operationsRoutes(app, deps);
  await dashboardRoutes(app);

  await app.ready();
  return Object.assign(app, { metrics, service, ledger: service.ledger });
}
