// Process entry of the CLI: runs main and exits with its code. Kept apart from main.ts so
// tests can import main without exiting.
import { main } from './main.js';

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
