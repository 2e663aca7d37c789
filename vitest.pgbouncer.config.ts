import { defineConfig } from 'vitest/config';

// The tests that drive the coordinator end to end, retention and the settler (their
// transaction-scoped locks, the settler's VACUUM), again through Debian's PgBouncer in
// transaction mode (test/helpers/pgbouncer-setup.ts): unnamed statements, per-transaction
// settings, LISTEN on a direct connection.
export default defineConfig({
  test: {
    include: ['test/coordinator.test.ts', 'test/coordinator-servers.test.ts', 'test/openai.test.ts', 'test/retention.test.ts', 'test/settle.test.ts'],
    globalSetup: ['test/helpers/pgbouncer-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 3,
    expect: { poll: { timeout: 30_000, interval: 20 } },
  },
});
