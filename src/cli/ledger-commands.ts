// ins ledger verify|close on the operator's own machine (the configured database, or the
// running server's over the admin socket): the database against its closed days, and closing
// the days that are due now instead of at the next hourly look. With --server, `ledger
// verify` is the HTTP check instead (src/ledger-client, dispatched by main.ts).
// The ledger's modules are loaded when one of these runs, not by every other command.
import type { Command } from './command.js';
import { CommandError, wholeNumberFlag } from './io.js';

const days = (raw: string | undefined): number => wholeNumberFlag('days', raw, 1, 3660, 30);

export const LEDGER_COMMANDS: Record<string, Command> = {
  'ledger verify': {
    usage: 'ledger verify [--days N]',
    summary:
      'check this database against its closed ledger days: signatures, chain, every entry, daily_points (ins ledger verify --server URL checks a service over HTTP)',
    args: [],
    flags: ['days'],
    async run(db, _args, { json, filter }, io) {
      const [{ checkDatabase }, { countDifferences, describe }] = await Promise.all([
        import('../ledger/check.js'),
        import('../ledger-format/day.js'),
      ]);
      const r = await checkDatabase(db, days(filter.days));
      if (json) io.out(JSON.stringify(r));
      else {
        io.out(
          r.days.length === 0
            ? 'no closed day yet'
            : `${r.days.length} closed day${r.days.length === 1 ? '' : 's'} (${r.days[0]} to ${r.days.at(-1)}) checked against this database`,
        );
        for (const d of r.differences) io.out(describe(d));
        if (r.days.length) io.out(r.differences.length === 0 ? 'everything verifies' : countDifferences(r.differences.length));
      }
      // Its last line, on stderr, is also --server's (src/ledger-client/cli.ts).
      if (r.differences.length) throw new CommandError(`${countDifferences(r.differences.length)} in the ledger`);
    },
  },
  'ledger close': {
    usage: 'ledger close',
    summary: 'close the ledger days that are due now (servers also do it every hour)',
    args: [],
    async run(db, _args, { json, verify, ledgerKeyFile }, io) {
      const [{ closeDueDays }, { loadLedgerKey }] = await Promise.all([import('../ledger/close.js'), import('../ledger/keys.js')]);
      const key = await loadLedgerKey(db, ledgerKeyFile);
      if (!key.sign)
        throw new CommandError(`the ledger's key ${key.keyId} lives in a server's LEDGER_KEY_FILE: run this where LEDGER_KEY_FILE is set`);
      const r = await closeDueDays(db, { key, window: verify.evidenceWindow, server: `ins ledger close ${process.pid}` });
      io.out(json ? JSON.stringify(r) : r.closed.length ? `closed ${r.closed.join(', ')}` : 'no day is due');
    },
  },
};
