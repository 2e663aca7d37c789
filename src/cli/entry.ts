// Process entry of the CLI: runs main and exits with its code. Kept apart from main.ts so
// tests can import main without exiting.
import v8 from 'node:v8';
import { main } from './main.js';

// A command people type opens the embedded database for a moment. V8 compiles PGlite's
// WebAssembly with its baseline compiler (Liftoff) and then, in background threads, again with
// its optimising one for the functions that run hot: work a command that ends in a second never
// uses. Liftoff alone halves the CPU of `ins node add` (docs/benchmarks.md). The server, the
// worker, imports, migrations and the ledger's commands may run long enough over a large
// database for the optimised code to pay: they keep V8's tiers. Set before PGlite compiles its
// module (when a command opens the database), not at import.
const QUICK = new Set(['node', 'key', 'model', 'job']);
if (QUICK.has(process.argv[2] ?? '')) v8.setFlagsFromString('--liftoff-only');

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
