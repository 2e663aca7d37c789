import { defineConfig } from 'vitest/config';

// The real coding-agent clients (Claude Code, Codex) through the network: `npm run test:clients`
// installs them into .clients/ first (scripts/clients/install.sh); each client run starts a
// native process of its own, so one file at a time.
export default defineConfig({
  test: {
    include: ['test/clients/**/*.client.ts'],
    globalSetup: ['test/helpers/postgres-run.ts'],
    testTimeout: 180_000,
    hookTimeout: 60_000,
    pool: 'forks',
    fileParallelism: false,
    expect: { poll: { timeout: 30_000, interval: 20 } },
  },
});
