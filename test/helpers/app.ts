// Builds the real app on a fresh database of the given backend, with helpers to create
// nodes and keys the way the CLI does.
import type { Database } from '../../src/db/database.js';
import type { CoordinatorConfig } from '../../src/config.js';
import type { VerifyConfig } from '../../src/config-verify.js';
import { buildApp, type AppOptions, type LedgerOptions, type RetentionOptions } from '../../src/app.js';
import { createNode } from '../../src/nodes/lifecycle.js';
import { addApiKey } from '../../src/nodes/api-keys.js';
import type { Backend } from './db.js';

export type TestApp = Awaited<ReturnType<typeof buildApp>>;

// Verification (src/verify/) copies a random share of jobs: it is off unless a test turns it on,
// so that other tests count exactly the jobs they submit. Turned on, it audits 20 ms after jobs
// are done rather than VERIFY_AUDIT_DELAY's 250 ms: tests that wait on audit after audit spent
// most of their time in that pause (docs/benchmarks.md).
export async function startApp(
  backend: Backend,
  opts: {
    bodyLimit?: number;
    defaultPointsPerJob?: number;
    coordinator?: Partial<CoordinatorConfig>;
    dispatch?: AppOptions['dispatch'];
    verify?: Partial<VerifyConfig>;
    ledger?: LedgerOptions;
    retention?: RetentionOptions;
    rateLimits?: AppOptions['rateLimits'];
    keepAliveTimeoutMs?: number;
    closingLingerMs?: number;
  } = {},
) {
  const db: Database = await backend.open();
  const app = await buildApp({ db, ...opts, verify: { enabled: false, auditDelay: 0.02, ...opts.verify } });
  return {
    app,
    db,
    addNode: async (name: string) => (await createNode(db, name)).key,
    addReader: async (label = 'dashboard') => (await addApiKey(db, 'reader', label)).key,
    addUser: async (label = 'app') => (await addApiKey(db, 'user', label)).key,
    close: async () => {
      await app.close();
      await db.close();
    },
  };
}

export function report(apiKey: string, over: Record<string, unknown> = {}) {
  return {
    job_id: `job-${Math.random().toString(36).slice(2)}`,
    api_key: apiKey,
    model_name: 'llama3.2:latest',
    result: { message: 'hello' },
    status: 'success',
    ...over,
  };
}

export const todayUtc = (): string => new Date().toISOString().slice(0, 10);
