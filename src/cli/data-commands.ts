// ins migrate, ins import nodes|results: the database itself and bulk history.
import path from 'node:path';
import { migrate } from '../db/migrate.js';
import { nodesImport } from '../import/nodes.js';
import { resultsImport } from '../import/results.js';
import { ImportRejected, runImport, type ImportSpec } from '../import/run.js';
import { CsvFormatError } from '../import/csv.js';
import type { Command } from './command.js';
import { CommandError } from './io.js';

function importCommand(what: 'nodes' | 'results', spec: ImportSpec, summary: string): Command {
  return {
    usage: `import ${what} FILE.csv [--skip-bad-rows]`,
    summary,
    args: ['FILE.csv'],
    flags: ['skip-bad-rows'],
    async run(db, [file], { json, skipBadRows, progress, cwd }, io) {
      try {
        const s = await runImport(db, cwd ? path.resolve(cwd, file!) : file!, spec, { skipBadRows, progress });
        if (json) return io.out(JSON.stringify(s));
        const rate = s.seconds > 0 ? Math.round(s.rows_read / s.seconds) : s.rows_read;
        io.out(
          `imported ${s.imported.toLocaleString('en')} ${what} of ${s.rows_read.toLocaleString('en')} rows in ${s.seconds.toFixed(1)} s (${rate.toLocaleString('en')} rows/s)` +
            (s.bad_rows ? `; skipped ${s.bad_rows} bad row${s.bad_rows === 1 ? '' : 's'}` : ''),
        );
        for (const b of s.examples.slice(0, 20)) io.err(`  line ${b.line}: ${b.reason}`);
      } catch (err) {
        if (err instanceof ImportRejected) {
          throw new CommandError(
            `${err.message}:\n${err.examples
              .slice(0, 20)
              .map((b) => `  line ${b.line}: ${b.reason}`)
              .join('\n')}${err.examples.length > 20 ? '\n  …' : ''}`,
          );
        }
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT' || code === 'EISDIR' || code === 'EACCES') throw new CommandError(`cannot read ${file}: ${code}`);
        if (err instanceof CsvFormatError) throw new CommandError(`${file}: ${err.message}; nothing was imported`);
        throw err;
      }
    },
  };
}

export const DATA_COMMANDS: Record<string, Command> = {
  migrate: {
    usage: 'migrate',
    summary: 'apply pending database migrations',
    args: [],
    async run(db, _args, { json }, io) {
      const applied = await migrate(db);
      if (json) io.out(JSON.stringify({ applied }));
      else io.out(applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
    },
  },
  'import nodes': importCommand('nodes', nodesImport, 'import nodes with their existing keys: columns name,api_key or name,api_key_sha256'),
  'import results': importCommand(
    'results',
    resultsImport,
    'import job results history: job_id,node_name,model_name,status,points,received_at[,result]; aggregates follow',
  ),
};
