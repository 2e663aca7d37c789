// Streams a CSV file as records with their line numbers, with constant memory, reporting the
// bytes read so a progress bar can show how far along the file is.
import { createReadStream } from 'node:fs';
import { Transform } from 'node:stream';
import { parse } from 'csv-parse';

export interface CsvRecord {
  line: number;
  fields: Record<string, string>;
  extra: boolean;
}

/** The file is not the CSV an import reads (its header, its quoting, nothing in it): nothing is imported. */
export class CsvFormatError extends Error {
  override name = 'CsvFormatError';
}

/** Checks the header against the accepted column sets; returns the set that matched. */
export function matchHeader(header: string[], required: string[][], optional: string[]): string[] {
  const set = new Set(header);
  const unknown = header.filter((h) => !required.flat().includes(h) && !optional.includes(h));
  const match = required.find((cols) => cols.every((c) => set.has(c)));
  if (!match || unknown.length > 0) {
    const wanted = required.map((cols) => cols.join(',')).join(' or ');
    throw new CsvFormatError(
      `line 1: expected the columns ${wanted}${optional.length ? ` (optional: ${optional.join(',')})` : ''}; got ${header.join(',') || 'nothing'}`,
    );
  }
  return match;
}

export async function* readCsv(file: string, onBytes: (n: number) => void): AsyncGenerator<{ header: string[] } | CsvRecord> {
  // The file must be UTF-8 (or UTF-16 with its byte order mark, which csv-parse reads): other
  // bytes would become U+FFFD in names and keys without a word, so they stop the import.
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  let offset = 0;
  let utf16: boolean | undefined;
  const counter = new Transform({
    transform(chunk: Buffer, _enc, done) {
      onBytes(chunk.length);
      utf16 ??= chunk.length >= 2 && ((chunk[0] === 0xff && chunk[1] === 0xfe) || (chunk[0] === 0xfe && chunk[1] === 0xff));
      if (!utf16) {
        try {
          utf8.decode(chunk, { stream: true });
        } catch {
          return done(
            new CsvFormatError(`the file is not UTF-8 (a byte that is not, within bytes ${offset + 1}–${offset + chunk.length}): save it as UTF-8`),
          );
        }
      }
      offset += chunk.length;
      done(null, chunk);
    },
  });
  const parser = parse({ bom: true, skip_empty_lines: true, relax_column_count: true, info: true, trim: false });
  createReadStream(file)
    .on('error', (err) => parser.destroy(err))
    .pipe(counter)
    .on('error', (err) => parser.destroy(err))
    .pipe(parser);
  let header: string[] | undefined;
  try {
    for await (const { record, info } of parser as AsyncIterable<{ record: string[]; info: { lines: number } }>) {
      if (!header) {
        header = record.map((h) => h.trim());
        yield { header };
        continue;
      }
      const fields: Record<string, string> = {};
      header.forEach((h, i) => (fields[h] = record[i] ?? ''));
      yield { line: info.lines, fields, extra: record.length !== header.length };
    }
  } catch (err) {
    const e = err as { code?: string; lines?: number; message: string };
    if (e.code?.startsWith('CSV_')) throw new CsvFormatError(`line ${e.lines ?? '?'}: malformed CSV: ${e.message}`);
    throw err;
  }
  if (!header) throw new CsvFormatError('the file is empty: expected a header line');
}
