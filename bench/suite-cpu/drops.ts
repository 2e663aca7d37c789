// What the suite's PostgreSQL databases cost to drop (test/helpers/postgres-run.ts): creates N
// copies of the tests' migrated template, then drops them, P at a time, and prints the wall time
// of each step. Run it idle and beside busy cores (docs/benchmarks.md):
//   TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test npx tsx bench/suite-cpu/drops.ts [N=40] [P=1]
// The template exists once the suite has run on PostgreSQL.
import pg from 'pg';

const url = process.env.TEST_DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/test';
const n = Number(process.argv[2] ?? 40);
const parallel = Number(process.argv[3] ?? 1);

const admin = new pg.Client({ connectionString: url });
await admin.connect();
const template = (await admin.query<{ datname: string }>(`SELECT datname FROM pg_database WHERE datname LIKE 'ins\\_template\\_%' LIMIT 1`)).rows[0]?.datname;
if (!template) throw new Error('no ins_template_… database: run the suite on PostgreSQL once');
const names = Array.from({ length: n }, (_, i) => `ins_bench_drop_${i}`);
let t = performance.now();
for (const name of names) await admin.query(`CREATE DATABASE ${name} TEMPLATE ${template}`);
console.log(`created ${n} copies of ${template}: ${Math.round(performance.now() - t)} ms`);
await admin.end();

const queue = [...names];
t = performance.now();
await Promise.all(Array.from({ length: parallel }, async () => {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  for (let name = queue.shift(); name; name = queue.shift()) await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await c.end();
}));
const ms = performance.now() - t;
console.log(`dropped ${n}, ${parallel} at a time: ${Math.round(ms)} ms (${Math.round(ms / n)} ms a drop)`);
