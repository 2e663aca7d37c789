// A vitest setup file, used when INS_TEST_CPU_LOG names a file (vitest.config.ts): appends the
// CPU seconds the test process spent in each test file, from its first hook to its last (the
// file's imports are not in it). bench/suite-cpu/report.ts.
import { appendFileSync } from 'node:fs';
import { afterAll, beforeAll, expect } from 'vitest';

let start: NodeJS.CpuUsage;
beforeAll(() => {
  start = process.cpuUsage();
});
afterAll(() => {
  const d = process.cpuUsage(start);
  appendFileSync(
    process.env.INS_TEST_CPU_LOG!,
    `in-process\t${(d.user / 1e6).toFixed(3)}\t${(d.system / 1e6).toFixed(3)}\t${expect.getState().testPath ?? ''}\t\n`,
  );
});
