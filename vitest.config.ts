import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The PostgreSQL databases the tests create dropped without the tests waiting, what is left
    // at the run's end; src/ compiled once for the processes tests start, rather than tsx in each
    // of them. Teardowns run last to first: the run's left-over processes are killed before its
    // databases are dropped.
    globalSetup: ['test/helpers/postgres-run.ts', 'test/helpers/build-cli.ts'],
    // Where the suite's CPU goes, per file: INS_TEST_CPU_LOG=FILE (bench/suite-cpu/report.ts).
    ...(process.env.INS_TEST_CPU_LOG ? { setupFiles: ['bench/suite-cpu/setup.ts'] } : {}),
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Test processes hold in-memory PGlite databases for seconds: V8's optimising recompiles of
    // its WebAssembly cost more CPU than they give back there (src/cli/entry.ts, which does the
    // same for `ins` commands; docs/benchmarks.md).
    execArgv: ['--liftoff-only'],
    // Each of the four processes runs file after file with its modules loaded once (not a new
    // process a file): a third of the suite's CPU was loading them again. No test mocks a
    // module, fakes timers or changes process.env; in-memory databases are reset between uses
    // (test/helpers/pglite-reuse.ts).
    isolate: false,
    // Two cores, four files at a time: many files mostly wait (for a worker process, a deadline,
    // an audit), so on an idle machine three left a third of the cores unused (126-135 % of
    // 200); five were no faster than four in the same hour. Measured in docs/benchmarks.md.
    maxWorkers: 4,
    // expect.poll waits for a state; its default second is too short on a loaded machine.
    expect: { poll: { timeout: 30_000, interval: 20 } },
  },
});
