// What the suite's PostgreSQL databases cost to drop (test/helpers/postgres-run.ts): creates N
// copies of the tests' migrated template, then drops them, P at a time, as the suite does, and
// prints the wall time of each step. Run it idle and beside busy cores (docs/benchmarks.md):
//   TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test npx tsx bench/suite-cpu/drops.ts [N=40] [P=1]
// The template exists once the suite has run on PostgreSQL with these migrations.
import pg from 'pg';
import { templateName } from '../../test/helpers/db.js';
import { dropDatabases } from '../../test/helpers/postgres-run.js';

const url = process.env.TEST_DATABASE_URL;
if (!url) throw new Error('set TEST_DATABASE_URL (e.g. postgresql://postgres@127.0.0.1:5432/test)');
const n = Number(process.argv[2] ?? 40);
const parallel = Number(process.argv[3] ?? 1);

const admin = new pg.Client({ connectionString: url });
await admin.connect();
// The template of these migrations, not one being built or an old one.
const template = templateName();
if (!(await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [template])).rowCount)
  throw new Error(`no ${template} database: run the suite on PostgreSQL once`);
const names = Array.from({ length: n }, (_, i) => `ins_bench_drop_${i}`);
let t = performance.now();
for (const name of names) await admin.query(`CREATE DATABASE ${name} TEMPLATE ${template}`);
console.log(`created ${n} copies of ${template}: ${Math.round(performance.now() - t)} ms`);
await admin.end();

t = performance.now();
await dropDatabases(names, parallel);
const ms = performance.now() - t;
console.log(`dropped ${n}, ${parallel} at a time: ${Math.round(ms)} ms (${Math.round(ms / n)} ms a drop)`);
