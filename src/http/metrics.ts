// Prometheus metrics of one app instance (its own registry, so several apps in one process,
// as in tests, do not collide): requests by route and status, latency, results recorded,
// points credited, and the database pool.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Database } from '../db/database.js';

export interface Metrics {
  registry: Registry;
  requests: Counter<'method' | 'route' | 'status'>;
  duration: Histogram<'method' | 'route' | 'status'>;
  results: Counter<'status' | 'outcome'>;
  points: Counter;
  keyLookups: Counter<'source'>;
  statements: Histogram<'statement'>;
}

export function createMetrics(db: Database, withProcessMetrics: boolean): Metrics {
  const registry = new Registry();
  if (withProcessMetrics) collectDefaultMetrics({ register: registry });
  const labelNames = ['method', 'route', 'status'] as const;
  const requests = new Counter({ name: 'http_requests_total', help: 'HTTP requests by route and status', labelNames, registers: [registry] });
  const duration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request latency',
    labelNames,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  const results = new Counter({ name: 'ins_results_total', help: 'Job results by reported status and outcome (recorded, replayed, conflict)', labelNames: ['status', 'outcome'], registers: [registry] });
  const points = new Counter({ name: 'ins_points_credited_total', help: 'Points credited to nodes', registers: [registry] });
  const keyLookups = new Counter({ name: 'ins_key_lookups_total', help: 'API key lookups by source (cache or database)', labelNames: ['source'], registers: [registry] });
  const statements = new Histogram({
    name: 'ins_db_statement_duration_seconds',
    help: 'Database statement latency by statement name (src/db/database.ts Sql.name)',
    labelNames: ['statement'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
    registers: [registry],
  });
  new Gauge({
    name: 'ins_db_pool_connections',
    help: 'Database pool connections by state',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const s = db.poolStats();
      this.set({ state: 'total' }, s.total);
      this.set({ state: 'idle' }, s.idle);
      this.set({ state: 'waiting' }, s.waiting);
    },
  });
  return { registry, requests, duration, results, points, keyLookups, statements };
}
