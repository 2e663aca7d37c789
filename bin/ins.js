#!/usr/bin/env node
// The `ins` command: runs the compiled CLI (npm ci builds it through the `prepare` script).
import { existsSync } from 'node:fs';

const entry = new URL('../dist/cli/entry.js', import.meta.url);
if (!existsSync(entry)) {
  console.error('ins: dist/ is missing; run `npm run build` (npm ci does it for you)');
  process.exit(1);
}
await import(entry.href);
