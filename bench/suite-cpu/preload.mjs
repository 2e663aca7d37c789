// Loaded into each process the tests start (`node --import`), when INS_TEST_CPU_LOG names a
// file: at exit, appends the process's CPU seconds (user, system), the test file that started it
// and its command line. A process killed with SIGKILL writes nothing. bench/suite-cpu/report.ts.
import { appendFileSync } from 'node:fs';

process.on('exit', () => {
  const u = process.resourceUsage();
  const line = [
    'spawned',
    (u.userCPUTime / 1e6).toFixed(3),
    (u.systemCPUTime / 1e6).toFixed(3),
    process.env.INS_TEST_CPU_FILE ?? '',
    process.argv.slice(2).join(' ').slice(0, 100),
  ];
  appendFileSync(process.env.INS_TEST_CPU_LOG, `${line.join('\t')}\n`);
});
