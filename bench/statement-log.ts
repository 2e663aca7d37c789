// PostgreSQL's own time per statement, from its log written with log_min_duration_statement = 0
// (`npm run bench -- --statement-log`, set on the bench's databases only): the server's named
// statements log each phase ("duration: 0.412 ms  execute jobs_submit: …", and parse, bind),
// summed here by phase and name — calls and mean in ms, and calls and ms per job when the jobs
// are given. Statements without a name (BEGIN, COMMIT, SET) are summed by their first words.
//
//   npx tsx bench/statement-log.ts [--jobs N] [--since 'YYYY-MM-DD HH:MM:SS'] [--database PREFIX (ins_bench_)] /var/log/postgresql/postgresql-15-main.log
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

// log_line_prefix '%m [%p] %q%u@%d ' (Debian's default): time, pid, user@database.
const LINE =
  /^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\S* \S+ \[\d+\] [^@\s]*@(\S+) LOG: {2}duration: ([\d.]+) ms {2}(?:(parse|bind|execute) ([^:]+):|statement:) ?(.*)$/;

/** Sums the duration lines logged at or after `since`, of databases whose name starts with `database`. */
export function sumStatementLog(text: string, since = '', database = 'ins_bench_'): Map<string, { calls: number; ms: number }> {
  const by = new Map<string, { calls: number; ms: number }>();
  for (const line of text.split('\n')) {
    const m = LINE.exec(line);
    if (!m || m[1]! < since || !m[2]!.startsWith(database)) continue;
    const [, , , ms, phase, name, rest] = m;
    const key = phase
      ? `${phase} ${name === '<unnamed>' ? rest!.split(/\s+/).slice(0, 2).join(' ') : name}`
      : `simple ${rest!.split(/\s+/).slice(0, 2).join(' ')}`;
    const s = by.get(key) ?? { calls: 0, ms: 0 };
    s.calls++;
    s.ms += Number(ms);
    by.set(key, s);
  }
  return by;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { jobs: { type: 'string' }, since: { type: 'string', default: '' }, database: { type: 'string', default: 'ins_bench_' } },
  });
  const jobs = values.jobs ? Number(values.jobs) : undefined;
  const by = sumStatementLog(positionals.map((f) => readFileSync(f, 'utf8')).join('\n'), values.since, values.database);
  const total = [...by.values()].reduce((a, s) => a + s.ms, 0);
  console.log(`| phase and statement | calls | mean ms | total ms |${jobs ? ' calls per job | ms per job |' : ''}`);
  console.log(`|---|---|---|---|${jobs ? '---|---|' : ''}`);
  for (const [k, s] of [...by].sort((a, b) => b[1].ms - a[1].ms)) {
    console.log(
      `| ${k} | ${s.calls} | ${(s.ms / s.calls).toFixed(3)} | ${s.ms.toFixed(0)} |${jobs ? ` ${(s.calls / jobs).toFixed(3)} | ${(s.ms / jobs).toFixed(4)} |` : ''}`,
    );
  }
  console.log(`| all | | | ${total.toFixed(0)} |${jobs ? ` | ${(total / jobs).toFixed(4)} |` : ''}`);
}
