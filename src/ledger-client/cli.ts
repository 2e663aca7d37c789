// `ins ledger verify --server URL [--node NAME --key KEY] [--days N]`: the arguments, the run,
// and what it prints. Exit 0 when everything verifies, 1 naming each difference, 2 bad usage.
import { parseArgs } from 'node:util';
import { notWholeNumberFlag, wholeNumber } from '../whole-number.js';
import { countDifferences, describe } from '../ledger-format/day.js';
import { LedgerHttpError, verifyLedger, type VerifyOptions } from './verify.js';

export const LEDGER_VERIFY_HELP = `usage: ins ledger verify --server URL [--node NAME --key KEY] [--days N] [--key-id ID] [--json]

Checks the service's signed points ledger from this machine (docs/ledger.md):
  --server URL   the service, e.g. https://points.example.org
  --node NAME    your node: its entries and proofs, daily_points and unique_nodes (with --key)
  --key KEY      your node key (nk_…) with --node, or a reader key (rk_…): alone, it checks
                 every node's entries of each day from the export
  --days N       the last N closed days (default 30)
  --key-id ID    the key id you noted before: another published key is a difference
  --json         the report as JSON
Without --key: the signatures, the chain and the public per-node totals.
Without --server: this machine's database against its closed days (ins ledger verify --help).
Exit 0: everything verifies; 1: differences (each named by day, node and entry); 2: bad usage.`;

export async function runLedgerVerify(argv: string[], out: (line: string) => void, err: (line: string) => void): Promise<number> {
  let o: VerifyOptions;
  let json = false;
  try {
    const { values } = parseArgs({
      args: argv,
      strict: true,
      options: {
        server: { type: 'string' },
        node: { type: 'string' },
        key: { type: 'string' },
        days: { type: 'string' },
        'key-id': { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
    if (values.help) {
      out(LEDGER_VERIFY_HELP);
      return 0;
    }
    const days = values.days === undefined ? 30 : wholeNumber(values.days, 1, 3660);
    if (days === undefined) throw new Error(notWholeNumberFlag('days', values.days!, 1, 3660));
    if (!values.server || !/^https?:\/\//.test(values.server)) throw new Error("--server must be the service's http:// or https:// URL");
    if (values.node !== undefined && values.key === undefined) throw new Error("--node needs --key (the node's key, or a reader key)");
    o = {
      server: values.server,
      node: values.node,
      key: values.key,
      days,
      keyId: values['key-id'],
      waiting: (s, path) => err(`ins ledger verify: the service's rate limit: waiting ${s} s (${path.split('?')[0]})`),
    };
    json = values.json ?? false;
  } catch (e) {
    err(`ins ledger verify: ${(e as Error).message}\n(see: ins ledger verify --help)`);
    return 2;
  }
  let report;
  try {
    report = await verifyLedger(o);
  } catch (e) {
    if (e instanceof LedgerHttpError) {
      err(`ins ledger verify: the service refused: ${e.message}`);
      return 1;
    }
    // fetch's own message is only "fetch failed": its cause says why (ECONNREFUSED, ENOTFOUND).
    const cause = (e as Error & { cause?: unknown }).cause;
    const why = e instanceof TypeError && cause instanceof Error ? `cannot reach ${o.server} (${cause.message})` : (e as Error).message;
    err(`ins ledger verify: ${why}`);
    return 1;
  }
  if (json) {
    out(JSON.stringify(report));
  } else if (report.days.length === 0) {
    out(`no closed day yet at ${o.server} (key ${report.keyId})`);
  } else {
    const span = report.days.length === 1 ? report.days[0] : `${report.days[0]} to ${report.days.at(-1)}`;
    out(
      `${o.server}, key ${report.keyId}: ${report.days.length} closed day${report.days.length === 1 ? '' : 's'} (${span}) checked: ${report.compared.join(', ')}`,
    );
    for (const d of report.differences) out(describe(d));
    out(report.differences.length === 0 ? 'everything verifies' : countDifferences(report.differences.length));
  }
  if (report.differences.length === 0) return 0;
  // Ends as the check on the database does (src/cli/ledger-commands.ts, its failure reported by
  // src/cli/io.ts reportFailure, which this layer may not import): the count on stderr and, with
  // --json, {"error": …} after the report on stdout.
  const failure = `${countDifferences(report.differences.length)} in the ledger`;
  err(`ins: ${failure}`);
  if (json) out(JSON.stringify({ error: failure }));
  return 1;
}
