// The shape every import shares: stream the CSV, check each row, load the good ones into a
// staging table, let the database find what only it can (unknown nodes, ids already taken or
// repeated), then apply — all in one transaction. Any bad row rejects the whole file unless
// skipBadRows, and the report names bad rows by line number.
import { statSync } from 'node:fs';
import { sql, type Database, type Queryable } from '../db/database.js';
import { matchHeader, readCsv } from './csv.js';
import { Progress } from './progress.js';
import { StagingTable, type Value } from './staging.js';

export interface BadRow {
  line: number;
  reason: string;
}
export interface ImportOptions {
  skipBadRows: boolean;
  progress: boolean;
}
export interface ImportSummary {
  kind: string;
  file: string;
  rows_read: number;
  imported: number;
  bad_rows: number;
  /** The first bad rows, by line. */
  examples: BadRow[];
  seconds: number;
}

export class ImportRejected extends Error {
  constructor(
    readonly total: number,
    readonly examples: BadRow[],
  ) {
    super(`${total} bad row${total === 1 ? '' : 's'}; nothing was imported (fix them, or pass --skip-bad-rows to import the rest)`);
  }
}

export interface ImportSpec {
  kind: string;
  staging: string;
  columns: [string, string][];
  /** Accepted column sets (one must be present) and optional columns. */
  headers: string[][];
  optional: string[];
  /** The staging values of a row, or why it is bad. */
  check(fields: Record<string, string>, header: string[]): Value[] | string;
  /** SELECT line, reason … over the staging table: rows only the database can judge. */
  databaseChecks: string;
  /** Moves the staging rows into the real tables; returns how many were imported. */
  apply(tx: Queryable): Promise<number>;
}

const MAX_EXAMPLES = 100;

class BadRows {
  count = 0;
  readonly examples: BadRow[] = [];
  note(row: BadRow): void {
    this.count++;
    if (this.examples.length < MAX_EXAMPLES) this.examples.push(row);
  }
}

// Streams the file into the staging table; returns the number of data rows read.
async function load(file: string, spec: ImportSpec, staging: StagingTable, bad: BadRows, progress: Progress): Promise<number> {
  let header: string[] = [];
  let rows = 0;
  for await (const item of readCsv(file, (n) => progress.addBytes(n))) {
    if ('header' in item) {
      matchHeader(item.header, spec.headers, spec.optional);
      header = item.header;
      continue;
    }
    rows++;
    progress.addRow();
    const checked = item.extra ? `expected ${header.length} fields` : spec.check(item.fields, header);
    if (typeof checked === 'string') bad.note({ line: item.line, reason: checked });
    else await staging.add(item.line, checked);
  }
  await staging.finish();
  return rows;
}

// Runs the database's checks; notes and removes the rows they find.
async function rejectFromStaging(tx: Queryable, spec: ImportSpec, bad: BadRows): Promise<void> {
  await tx.exec(`CREATE TEMP TABLE import_bad ON COMMIT DROP AS ${spec.databaseChecks}`);
  const [row] = await tx.query<{ n: number }>(sql('import_bad_count', 'SELECT count(DISTINCT line)::int AS n FROM import_bad'));
  if (row!.n === 0) return;
  bad.count += row!.n;
  const rows = await tx.query<BadRow>(
    sql('import_bad_first', `SELECT line::int AS line, reason FROM import_bad ORDER BY line LIMIT ${MAX_EXAMPLES}`),
  );
  bad.examples.push(...rows);
  bad.examples.sort((a, b) => a.line - b.line).splice(MAX_EXAMPLES);
  await tx.exec(`DELETE FROM ${spec.staging} s USING import_bad b WHERE s.line = b.line`);
}

export async function runImport(db: Database, file: string, spec: ImportSpec, opts: ImportOptions): Promise<ImportSummary> {
  const started = Date.now();
  const progress = new Progress(`importing ${spec.kind}`, statSync(file).size, opts.progress);
  const bad = new BadRows();
  try {
    return await db.transaction(async (tx) => {
      // A large file takes minutes; the service's per-statement limit is not meant for it.
      await tx.exec('SET LOCAL statement_timeout = 0');
      const staging = new StagingTable(tx, spec.staging, spec.columns);
      await staging.create();
      let rowsRead: number;
      try {
        rowsRead = await load(file, spec, staging, bad, progress);
      } catch (err) {
        await staging.abort();
        throw err;
      }
      progress.stage('checking and applying');
      await rejectFromStaging(tx, spec, bad);
      if (bad.count > 0 && !opts.skipBadRows) throw new ImportRejected(bad.count, bad.examples);
      const imported = await spec.apply(tx);
      return {
        kind: spec.kind,
        file,
        rows_read: rowsRead,
        imported,
        bad_rows: bad.count,
        examples: bad.examples,
        seconds: (Date.now() - started) / 1000,
      };
    });
  } finally {
    progress.stop();
  }
}
