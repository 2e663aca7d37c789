// Process entry of the CLI: runs main and exits with its code. Kept apart from main.ts so
// tests can import main without exiting.
import v8 from 'node:v8';
import { isBrief } from './brief.js';
import { main } from './main.js';

// A brief command (cli/brief.ts) opens the embedded database for a moment. V8 compiles PGlite's
// WebAssembly with its baseline compiler (Liftoff) and then, in background threads, again with
// its optimising one for the functions that run hot: work a command that ends in a second never
// uses. Liftoff alone halves the CPU of `ins node add` (docs/benchmarks.md). Set before PGlite
// compiles its module (when a command opens the database), not at import.
if (isBrief(process.argv.slice(2))) v8.setFlagsFromString('--liftoff-only');

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
