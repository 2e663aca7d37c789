// Every statement that credits points is written whole where it runs (results/credit.ts,
// jobs/sql/complete.ts, import/results.ts), and their credit part — the job_results insert and
// every aggregate and cache version it moves — is written once (CREDIT_PART) and included by
// all of them, or the aggregates the reads are served from would drift apart between write
// paths. Likewise the "node is suspended" rule (db/rules/suspended.ts) and the "live session"
// rule (db/rules/live.ts) in every statement that asks them.
import { describe, expect, it } from 'vitest';
import { CREDIT_PART, CREDIT_REPORTS } from '../src/results/credit.js';
import { COMPLETE } from '../src/jobs/sql/complete.js';
import { CREDIT_IMPORT, resultsImport } from '../src/import/results.js';
import { nodeSuspended } from '../src/db/rules/suspended.js';
import { LEASE } from '../src/jobs/sql/lease.js';
import { SUBMIT } from '../src/jobs/sql/submit.js';
import { liveSession, servingSession } from '../src/db/rules/live.js';
import { ELIGIBLE, CHECKERS } from '../src/verify/copies.js';
import { SCORERS } from '../src/verify/scores.js';
import { SWEEP } from '../src/jobs/sql/sweep.js';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';

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
  it('include the one credit part', () => {
    for (const statement of [CREDIT_REPORTS, COMPLETE, CREDIT_IMPORT]) {
      expect(creditPart(statement.text), statement.name).toBe(creditPart(`WITH\n${CREDIT_PART}`));
    }
    expect(resultsImport.kind).toBe('results');
  });

  it('credit every aggregate a read is served from', () => {
    const part = creditPart(CREDIT_REPORTS.text);
    for (const table of ['job_results', 'node_daily_points', 'model_nodes', 'model_node_days', 'roster_version', 'points_history']) {
      expect(part).toContain(table);
    }
  });

  it('nowhere write the credit part, the suspended rule or the live session rule by hand', () => {
    // Every source file outside the rules' own: no copy of their text.
    const files = execFileSync('git', ['ls-files', 'src'], { cwd: new URL('..', import.meta.url), encoding: 'utf8' })
      .split('\n')
      .filter((f) => f.endsWith('.ts'));
    for (const f of files) {
      const text = readFileSync(new URL(`../${f}`, import.meta.url), 'utf8');
      if (f !== 'src/results/credit.ts') expect(text.includes('INSERT INTO job_results AS r'), f).toBe(false);
      if (f !== 'src/db/rules/suspended.ts')
        expect(/node_standing \w+ WHERE \w+\.node_id = [\w.]+ AND \w+\.state = 'suspended'/.test(text), f).toBe(false);
      if (f !== 'src/db/rules/live.ts')
        expect(/\.disabled_at IS NULL AND \w+\.key_hash = \w+\.node_key_hash\s+AND \w+\.last_seen_at >/.test(text), f).toBe(false);
    }
    expect(LEASE.text).toContain(nodeSuspended('a.node_id'));
    expect(SUBMIT.text).toContain(nodeSuspended('a.node_id'));
    expect(COMPLETE.text).toContain(nodeSuspended('l.node_id'));
    expect(ELIGIBLE.text).toContain(servingSession('s', 'n', '$2', '$3'));
    expect(CHECKERS.text).toContain(servingSession('s', 'n', '$3', '$4'));
    expect(SCORERS.text).toContain(servingSession('s', 'n', '$2', '$3'));
    expect(SWEEP.text).toContain(liveSession('s', 'n', '$3'));
  });
});
