// The points ledger on the wire (docs/ledger.md): the signing key and closed days (public), a
// node's day with its proof (the node's key or a reader key, as get_points), and a day's
// export (a reader key). Entries are streamed a page at a time: a day of millions is never
// held in memory.
import { Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import {
  LedgerDayParams,
  LedgerDayResponses,
  LedgerDaysQuery,
  LedgerDaysResponses,
  LedgerExportParams,
  LedgerExportQuery,
  LedgerExportResponses,
  LedgerKeyResponses,
  LedgerNodeDayParams,
  LedgerNodeDayResponses,
} from '../generated/schemas.js';
import { isDay } from '../ledger-format/encoding.js';
import type { ClosedDay } from '../ledger/read.js';
import { HttpError } from '../http/http-error.js';
import { RequestValidationError } from '../http/validator.js';
import { valueError } from '../validation/pydantic.js';
import { authenticateKey, authorizeNodeRead } from './authenticate.js';
import type { App, Deps } from './types.js';

function checkedDay(day: string): string {
  if (!isDay(day)) throw new RequestValidationError([valueError(['path', 'day'], 'expected a UTC day as YYYY-MM-DD, e.g. 2026-01-05', day)]);
  return day;
}

function stream(reply: FastifyReply, type: string, chunks: AsyncGenerator<string>): FastifyReply {
  return reply
    .type(type)
    .header('cache-control', 'no-store')
    .send(Readable.from(chunks, { objectMode: false }));
}

export function ledgerRoutes(app: App, deps: Deps): void {
  const { reader, keys } = deps.service.ledger;
  const closedDay = async (day: string): Promise<ClosedDay> => {
    const header = await reader.day(checkedDay(day));
    if (!header) throw new HttpError(404, await reader.missing(day));
    return header;
  };

  app.get('/ledger/key', { schema: { response: LedgerKeyResponses } }, async () => {
    const key = await keys.get();
    return { algorithm: 'Ed25519' as const, key_id: key.keyId, public_key: key.publicKey, public_key_pem: key.publicPem };
  });

  app.get('/ledger/days', { schema: { querystring: LedgerDaysQuery, response: LedgerDaysResponses } }, async (req) => {
    const { closed_through, first_day } = await reader.status();
    return { closed_through, first_day, days: await reader.lastDays(req.query.last_days ?? 30) };
  });

  app.get('/ledger/days/:day', { schema: { params: LedgerDayParams, response: LedgerDayResponses } }, async (req) => {
    const header = await closedDay(req.params.day);
    return { ...header, node_totals: await reader.nodeTotals(header.day) };
  });

  app.get('/ledger/days/:day/nodes/:node_name', { schema: { params: LedgerNodeDayParams, response: LedgerNodeDayResponses } }, async (req, reply) => {
    const { day, node_name } = req.params;
    await authorizeNodeRead(deps, req, node_name);
    const header = await closedDay(day);
    const node = await reader.node(node_name);
    if (!node) throw new HttpError(404, 'Node not found');
    return stream(reply, 'application/json; charset=utf-8', reader.nodeDay(header, node));
  });

  app.get(
    '/ledger/days/:day/export',
    { schema: { params: LedgerExportParams, querystring: LedgerExportQuery, response: LedgerExportResponses } },
    async (req, reply) => {
      await authorizeReader(deps, req);
      const header = await closedDay(req.params.day);
      const csv = req.query.format === 'csv' || (req.query.format === undefined && /\btext\/csv\b/i.test(req.headers.accept ?? ''));
      if (csv) reply.header('content-disposition', `attachment; filename="ledger-${header.day}.csv"`);
      return stream(reply, csv ? 'text/csv; charset=utf-8' : 'application/x-ndjson; charset=utf-8', reader.export(header, csv ? 'csv' : 'jsonl'));
    },
  );
}

async function authorizeReader(deps: Deps, req: FastifyRequest): Promise<void> {
  const principal = await authenticateKey(deps, req);
  if (principal.kind !== 'reader') throw new HttpError(403, 'The export takes a reader key (rk_…; ins key add-reader LABEL)');
}
