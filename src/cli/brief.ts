// The commands people type and wait for — `ins node add`, `ins key add-user`, `ins model list`,
// `ins job list` — open the embedded database for a moment and end. What PGlite sets up for a
// process that keeps running is wasted on them: V8's optimising compiles of its WebAssembly
// (src/cli/entry.ts) and PostgreSQL's 128 MB of shared buffers (src/db/pglite.ts). The server,
// the worker, imports, migrations and the ledger's commands may run long over a large database
// and keep both (docs/benchmarks.md, "ins start-up").
const BRIEF = new Set(['node', 'key', 'model', 'job']);

/** Whether `ins ARGV` is one of the brief commands above. */
export function isBrief(argv: readonly string[]): boolean {
  return BRIEF.has(argv[0] ?? '');
}
