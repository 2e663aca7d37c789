// Where the test suite's CPU goes, per test file and per command the tests start (`ins serve`,
// `ins node add`…), from the log a run with INS_TEST_CPU_LOG writes:
//   INS_TEST_CPU_LOG=/tmp/suite-cpu.log npm test; npx tsx bench/suite-cpu/report.ts /tmp/suite-cpu.log
// Not counted: vitest's own process, the files' imports, processes killed with SIGKILL (most
// `ins worker` processes) and PostgreSQL's backends (docs/benchmarks.md, "Where the suite's CPU goes").
import { readFileSync } from 'node:fs';
import path from 'node:path';

const file = process.argv[2];
if (!file) throw new Error('usage: tsx bench/suite-cpu/report.ts LOG');
const rows = readFileSync(file, 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((l) => {
    const [kind, user, system, testFile, command] = l.split('\t');
    return { kind: kind!, cpu: Number(user) + Number(system), testFile: path.basename(testFile ?? ''), command: command ?? '' };
  });
const sum = (xs: { cpu: number }[]) => xs.reduce((s, x) => s + x.cpu, 0);
const spawned = rows.filter((r) => r.kind === 'spawned');
console.log(
  `in the test processes: ${sum(rows.filter((r) => r.kind === 'in-process')).toFixed(1)} s; in ${spawned.length} processes they started: ${sum(spawned).toFixed(1)} s\n`,
);

const byFile = new Map<string, { inProcess: number; spawned: number; n: number }>();
for (const r of rows) {
  const e = byFile.get(r.testFile) ?? { inProcess: 0, spawned: 0, n: 0 };
  if (r.kind === 'spawned') {
    e.spawned += r.cpu;
    e.n++;
  } else e.inProcess += r.cpu;
  byFile.set(r.testFile, e);
}
console.log('| test file | CPU s | in process | started processes (n) |\n|---|---|---|---|');
for (const [f, e] of [...byFile].sort((a, b) => b[1].inProcess + b[1].spawned - a[1].inProcess - a[1].spawned).slice(0, 25)) {
  console.log(`| ${f} | ${(e.inProcess + e.spawned).toFixed(1)} | ${e.inProcess.toFixed(1)} | ${e.spawned.toFixed(1)} (${e.n}) |`);
}

// A command is its first words up to the first argument that is a value (`node add`, `serve`).
const byCommand = new Map<string, { cpu: number; n: number }>();
for (const r of spawned) {
  const words = r.command.split(' ').filter((w) => !w.endsWith('.js') && !w.endsWith('.ts'));
  const name =
    words[0] === 'node' || words[0] === 'key' || words[0] === 'job' || words[0] === 'model' ? words.slice(0, 2).join(' ') : (words[0] ?? '');
  const e = byCommand.get(name) ?? { cpu: 0, n: 0 };
  e.cpu += r.cpu;
  e.n++;
  byCommand.set(name, e);
}
console.log('\n| command | CPU s | processes | s each |\n|---|---|---|---|');
for (const [c, e] of [...byCommand].sort((a, b) => b[1].cpu - a[1].cpu))
  console.log(`| ${c || '(none)'} | ${e.cpu.toFixed(1)} | ${e.n} | ${(e.cpu / e.n).toFixed(2)} |`);
