import { defineConfig } from 'vitest/config';

// Fault tests restart shared services (PostgreSQL): they run alone, one file at a time.
export default defineConfig({
  test: {
    include: ['test/faults/**/*.fault.ts'],
    testTimeout: 120_000,
    hookTimeout: 60_000,
    pool: 'forks',
    fileParallelism: false,
    expect: { poll: { timeout: 30_000, interval: 20 } },
  },
});
