// Every statement that credits points is written whole where it runs (results/credit.ts,
// jobs/sql/complete.ts, import/results.ts), and their credit part — the job_results insert and
// every aggregate and cache version it moves — must be the same text in all of them, or the
// aggregates the reads are served from would drift apart between write paths.
import { describe, expect, it } from 'vitest';
import { CREDIT_REPORTS } from '../src/results/credit.js';
import { COMPLETE } from '../src/jobs/sql/complete.js';
import { resultsImport } from '../src/import/results.js';
import { readFileSync } from 'node:fs';

const BEGIN = '\n-- credit: begin\n';
const END = '\n-- credit: end\n';

function creditPart(text: string): string {
  const from = text.indexOf(BEGIN);
  const to = text.indexOf(END);
  expect(from, 'the statement marks its credit part').toBeGreaterThan(0);
  expect(to).toBeGreaterThan(from);
  expect(text.indexOf(BEGIN, from + 1), 'one credit part per statement').toBe(-1);
  return text.slice(from, to + END.length);
}

describe('credit statements', () => {
  it('share one credit part, word for word', () => {
    // The import's statement is not exported by itself: read it from its module's source.
    const importSource = readFileSync(new URL('../src/import/results.ts', import.meta.url), 'utf8');
    const parts = [CREDIT_REPORTS.text, COMPLETE.text, importSource].map(creditPart);
    expect(parts[1]).toBe(parts[0]);
    expect(parts[2]).toBe(parts[0]);
    expect(resultsImport.kind).toBe('results');
  });

  it('credit every aggregate a read is served from', () => {
    const part = creditPart(CREDIT_REPORTS.text);
    for (const table of ['job_results', 'node_daily_points', 'model_nodes', 'model_node_days', 'roster_version', 'points_history']) {
      expect(part).toContain(table);
    }
  });
});
