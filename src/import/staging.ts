// A temporary table that receives imported rows inside the import's transaction: COPY on
// PostgreSQL, batched inserts of one JSON parameter each on PGlite. Table and column names
// come from the importers' constants, never from the file.
import { once } from 'node:events';
import type { Writable } from 'node:stream';
import { sql, type Queryable } from '../db/database.js';

export type Value = string | number | null;
const BATCH = 5_000;

// COPY text format: backslash, tab, newline and carriage return escaped; NULL is \N.
function copyField(v: Value): string {
  if (v === null) return '\\N';
  return String(v).replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n').replace(/\r/g, '\\r');
}

export class StagingTable {
  private copy: Writable | undefined;
  private copyError: Error | undefined;
  // COPY lines are sent in chunks: one socket write per row costs more than the row itself.
  private copyChunk: string[] = [];
  private copyChunkBytes = 0;
  private batch: Record<string, unknown>[] = [];
  rows = 0;

  constructor(
    private readonly tx: Queryable,
    readonly name: string,
    private readonly columns: [string, string][],
  ) {}

  async create(): Promise<void> {
    const cols = [['line', 'bigint'], ...this.columns].map(([n, t]) => `${n} ${t}`).join(', ');
    await this.tx.exec(`CREATE TEMP TABLE ${this.name} (${cols}) ON COMMIT DROP`);
    if (this.tx.copyFrom) {
      this.copy = this.tx.copyFrom(`COPY ${this.name} (line, ${this.columns.map(([n]) => n).join(', ')}) FROM STDIN`);
      // Kept and rethrown by the next write: an unheard 'error' event would crash the process.
      this.copy.on('error', (err: Error) => (this.copyError ??= err));
    }
  }

  async add(line: number, values: Value[]): Promise<void> {
    this.rows++;
    if (this.copy) {
      const text = `${[line, ...values].map(copyField).join('\t')}\n`;
      this.copyChunk.push(text);
      this.copyChunkBytes += text.length;
      if (this.copyChunkBytes >= 64 * 1024) await this.flushCopy();
      return;
    }
    const row: Record<string, unknown> = { line };
    // A jsonb column's text goes in as the JSON it holds: json_populate_recordset would keep a
    // string as a JSON string ("{}"), where COPY parses the text into the object.
    this.columns.forEach(([n, type], i) => {
      const v = values[i]!;
      row[n] = type === 'jsonb' && typeof v === 'string' ? (JSON.parse(v) as unknown) : v;
    });
    this.batch.push(row);
    if (this.batch.length >= BATCH) await this.flush();
  }

  private async flushCopy(): Promise<void> {
    if (this.copyError) throw this.copyError;
    const chunk = this.copyChunk.join('');
    this.copyChunk = [];
    this.copyChunkBytes = 0;
    if (chunk && !this.copy!.write(chunk)) await once(this.copy!, 'drain');
  }

  private async flush(): Promise<void> {
    if (this.batch.length === 0) return;
    await this.tx.query(
      sql(`staging_insert_${this.name}`, `INSERT INTO ${this.name} SELECT * FROM json_populate_recordset(NULL::${this.name}, $1::json)`),
      [JSON.stringify(this.batch)],
    );
    this.batch = [];
  }

  /** On failure: a COPY still open would keep the connection busy and the ROLLBACK waiting. */
  async abort(): Promise<void> {
    const copy = this.copy;
    this.copy = undefined;
    if (!copy || copy.writableFinished) return;
    const closed = once(copy, 'close').catch(() => undefined);
    copy.destroy(new Error('import aborted'));
    await closed;
  }

  /** Ends loading: the table is complete and analysed afterwards. */
  async finish(): Promise<void> {
    if (this.copy) {
      await this.flushCopy();
      const done = once(this.copy, 'finish');
      this.copy.end();
      await done;
    } else {
      await this.flush();
    }
    await this.tx.exec(`ANALYZE ${this.name}`);
  }
}
