// The points ledger (docs/ledger.md) through the real app on both backends: days close once
// (two servers racing), signed and chained; a node's proof and the export recompute every
// root and total, equal to daily_points; changes made by hand in SQL after closing are named
// by day, node and entry by `ins ledger verify` (over HTTP and on the database); reversals
// after closing land on the day they are made; a reversal racing a close lands on exactly one
// side of it; imported history closes like reported history.
import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { runCommand } from '../src/cli/commands.js';
import { bufferIo } from '../src/cli/io.js';
import { sql } from '../src/db/database.js';
import { buildApp } from '../src/app.js';
import { resultsImport } from '../src/import/results.js';
import { ImportRejected, runImport } from '../src/import/run.js';
import { reverse } from '../src/verify/reversal.js';
import { checkDatabase } from '../src/ledger/check.js';
import { closeDueDays } from '../src/ledger/close.js';
import { DayCloser } from '../src/ledger/closer.js';
import { loadLedgerKey } from '../src/ledger/keys.js';
import { verifyLedger } from '../src/ledger-client/verify.js';
import { runLedgerVerify } from '../src/ledger-client/cli.js';
import { describe as describeDifference } from '../src/ledger-format/day.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { recordResult } from './helpers/production-paths.js';
import { aggregatesAndRecomputation } from './helpers/aggregates.js';
import { until } from './helpers/worker.js';

const DAY_MS = 86_400_000;
const day = (ago: number): string => new Date(Date.now() - ago * DAY_MS).toISOString().slice(0, 10);
const at = (ago: number, time: string): string => `${day(ago)}T${time}Z`;
const dir = mkdtempSync(path.join(tmpdir(), 'ins-ledger-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.each(backends)('the points ledger on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let url: string;
  const ids: Record<string, number> = {};
  const keys: Record<string, string> = {};
  let reader: string;
  afterEach(async () => t?.close());

  const q = <T>(name: string, text: string, values: unknown[] = []) => t.db.query<T>(sql(name, text), values);
  const credit = (node: string, jobId: string, receivedAt: string, model = 'm-a', points = 1.5) =>
    recordResult(t.db, {
      nodeId: ids[node]!,
      jobId,
      modelName: model,
      status: 'success',
      result: { message: 'x' },
      defaultPoints: points,
      receivedAt,
    });

  /** Three nodes, credits on the last five days (two and more days ago close under the default 24 h window), one reversed while its day is open. */
  async function start() {
    t = await startApp(backend);
    for (const n of ['alpha', 'beta', 'gamma 🚀']) {
      keys[n] = await t.addNode(n);
      ids[n] = (await q<{ id: number }>('t_id', 'SELECT id::int FROM nodes WHERE name = $1::text', [n]))[0]!.id;
    }
    reader = await t.addReader();
    for (const ago of [5, 4, 3, 2, 1, 0]) {
      if (ago === 4) continue; // a day without entries between two with
      for (const n of ['alpha', 'beta', 'gamma 🚀']) {
        for (let i = 0; i < 3 + ago; i++)
          await credit(n, `j-${ago}-${n}-${i}`, at(ago, `0${i % 10}:15:00.123456`), i % 2 ? 'm-b' : 'm-a', ago === 3 ? 0.25 : 1.5);
      }
    }
    // Same time, job ids that sort by code point (not by UTF-16 unit).
    await credit('alpha', 'same-\u{1F600}', at(3, '12:00:00'));
    await credit('alpha', 'same-\uFF5E', at(3, '12:00:00'));
    // Taken back before its day closes: a reversal entry of that day.
    expect(await t.db.transaction((tx) => reverse(tx, { jobIds: ['j-3-beta-0'] }, 'strike'))).toEqual({ results: 1, points: 0.25 });
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
  }

  it('closes each due day once, signed and chained, even with two servers racing; proofs and export recompute to daily_points', async () => {
    await start();
    const second = await buildApp({ db: t.db, verify: { enabled: false } });
    try {
      const [a, b] = await Promise.all([t.app.ledger.closer!.closeDue(), second.ledger.closer!.closeDue()]);
      const closed = [...a!.closed, ...b!.closed].sort();
      expect(closed).toEqual([day(5), day(4), day(3), day(2)]);
      expect(await t.app.ledger.closer!.closeDue()).toMatchObject({ closed: [] });
    } finally {
      await second.close();
    }
    const rows = await q<{ day: string; entries: number; reversals: number }>(
      't_days',
      'SELECT day::text, entries::int, reversals::int FROM ledger_days ORDER BY day',
    );
    expect(rows).toEqual([
      { day: day(5), entries: 24, reversals: 0 },
      { day: day(4), entries: 0, reversals: 0 },
      { day: day(3), entries: 21, reversals: 1 },
      { day: day(2), entries: 15, reversals: 0 },
    ]);

    // The wire: the key, the days, a day with its leaves.
    const key = (await t.app.inject({ url: '/ledger/key' })).json();
    expect(key).toMatchObject({ algorithm: 'Ed25519', key_id: expect.stringMatching(/^[0-9a-f]{16}$/) });
    const listing = (await t.app.inject({ url: '/ledger/days?last_days=2' })).json();
    expect(listing).toMatchObject({ closed_through: day(2), first_day: day(5) });
    expect(listing.days.map((d: { day: string }) => d.day)).toEqual([day(3), day(2)]);
    // RFC 4648 base64, one line, as strict decoders take it (PostgreSQL's encode() wraps at 76).
    for (const d of listing.days as { signature: string }[]) expect(d.signature).toMatch(/^[A-Za-z0-9+/]{86}==$/);
    const d3 = (await t.app.inject({ url: `/ledger/days/${day(3)}` })).json();
    expect(d3.node_totals.map((n: { name: string; points: string }) => [n.name, n.points])).toEqual([
      ['alpha', '4.5'],
      ['beta', '1.25'],
      ['gamma 🚀', '1.5'],
    ]);

    // Every mode of ins ledger verify agrees with the service: nothing differs.
    for (const o of [{}, { key: reader }, { node: 'gamma 🚀', key: keys['gamma 🚀'] }, { node: 'beta', key: reader }]) {
      const report = await verifyLedger({ server: url, days: 30, ...o });
      expect(report.differences.map(describeDifference)).toEqual([]);
      expect(report.days).toEqual([day(5), day(4), day(3), day(2)]);
    }
    expect(await checkDatabase(t.db, 30)).toMatchObject({ differences: [] });

    // A service whose rate limit answers 429 (here a real front server answering the first
    // daily_points so, Retry-After 1 s, and passing the rest on): the check waits, and passes.
    let limited = 0;
    const front = createServer((req, res) => {
      if (req.url === '/daily_points' && limited++ === 0)
        return void res
          .writeHead(429, { 'retry-after': '1', 'content-type': 'application/json' })
          .end('{"detail":"Too many requests; retry in 1 s"}');
      const back = httpRequest(`${url}${req.url}`, { method: req.method, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode!, r.headers);
        r.pipe(res);
      });
      req.pipe(back);
    });
    await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
    try {
      const waits: number[] = [];
      const report = await verifyLedger({
        server: `http://127.0.0.1:${(front.address() as AddressInfo).port}`,
        key: reader,
        days: 30,
        waiting: (s) => waits.push(s),
      });
      expect(waits).toEqual([1]);
      expect(report.differences.map(describeDifference)).toEqual([]);
    } finally {
      front.close();
    }

    // The node's view: its entries with the credit reversed since still a credit of its day.
    const beta = (await t.app.inject({ url: `/ledger/days/${day(3)}/nodes/beta`, headers: { api_key: keys.beta! } })).json();
    expect(beta.node).toMatchObject({ name: 'beta', credits: 6, reversals: 1, credited: '1.5', reversed: '0.25', points: '1.25' });
    expect(beta.entries.filter((e: { job_id: string }) => e.job_id === 'j-3-beta-0').map((e: { kind: string }) => e.kind)).toEqual([
      'credit',
      'reversal',
    ]);
    // Canonical order: by time, then by code point (U+FF5E before U+1F600, unlike UTF-16 order).
    const alpha = (await t.app.inject({ url: `/ledger/days/${day(3)}/nodes/alpha`, headers: { authorization: `Bearer ${reader}` } })).json();
    expect(alpha.entries.slice(-2).map((e: { job_id: string }) => e.job_id)).toEqual(['same-\uFF5E', 'same-\u{1F600}']);
    // A node without entries that day: proved absent.
    const absent = (await t.app.inject({ url: `/ledger/days/${day(4)}/nodes/beta`, headers: { api_key: keys.beta! } })).json();
    expect(absent).toMatchObject({ node: null, proof: null, absence: { left: null, right: null }, entries: [] });

    // The export: JSON lines and CSV, with exactly the day's entries.
    const jsonl = await t.app.inject({ url: `/ledger/days/${day(3)}/export`, headers: { api_key: reader } });
    expect(jsonl.headers['content-type']).toMatch(/application\/x-ndjson/);
    const lines = jsonl.body
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string });
    expect(lines.map((l) => l.type).join(' ')).toMatch(/^day node (entry ){8}node (entry ){7}node (entry ){6}end$/);
    const csv = await t.app.inject({ url: `/ledger/days/${day(3)}/export`, headers: { api_key: reader, accept: 'text/csv' } });
    expect(csv.body.split('\r\n')[0]).toBe('kind,job_id,node,model,points,time,reason');
    expect(csv.body.trimEnd().split('\r\n')).toHaveLength(22);
  });

  it('exports CSV that spreadsheets read as text: job ids and models starting = + - @ tab or CR are escaped (OWASP)', async () => {
    t = await startApp(backend);
    await t.addNode('delta');
    ids.delta = (await q<{ id: number }>('t_id', 'SELECT id::int FROM nodes WHERE name = $1::text', ['delta']))[0]!.id;
    reader = await t.addReader();
    const hostile = ['=HYPERLINK("http://x.example","y")', '+1+1', '-2+3', '@SUM(A1:A9)', '\tcmd', '\r=1', 'plain-1', 'a=b'];
    for (const [i, jobId] of hostile.entries()) await credit('delta', jobId, at(2, `01:0${i}:00`), i === 0 ? '=cmd|"/c calc"!A1' : 'm-a');
    await t.db.transaction((tx) => reverse(tx, { jobIds: ['-2+3'] }, '=2+2'));
    await t.app.ledger.closer!.closeDue();
    const res = await t.app.inject({ url: `/ledger/days/${day(2)}/export?format=csv`, headers: { api_key: reader } });
    expect(res.statusCode).toBe(200);
    const rows = res.body.trimEnd().split('\r\n').slice(1);
    expect(rows).toEqual(
      expect.arrayContaining([
        `credit,"'=HYPERLINK(""http://x.example"",""y"")",delta,"'=cmd|""/c calc""!A1",1.5,${at(2, '01:00:00.000000')},`,
        `credit,'+1+1,delta,m-a,1.5,${at(2, '01:01:00.000000')},`,
        `credit,'@SUM(A1:A9),delta,m-a,1.5,${at(2, '01:03:00.000000')},`,
        `credit,'\tcmd,delta,m-a,1.5,${at(2, '01:04:00.000000')},`,
        `credit,"'\r=1",delta,m-a,1.5,${at(2, '01:05:00.000000')},`,
        `credit,plain-1,delta,m-a,1.5,${at(2, '01:06:00.000000')},`,
        `credit,a=b,delta,m-a,1.5,${at(2, '01:07:00.000000')},`,
      ]),
    );
    // A reversal's reason is text too; points and times are the service's own, never escaped.
    expect(rows.filter((r) => r.startsWith('reversal,'))).toEqual([expect.stringMatching(/^reversal,'-2\+3,delta,m-a,1\.5,[^,']+,'=2\+2$/)]);
    // The JSON lines export keeps the record exact.
    const jsonl = (await t.app.inject({ url: `/ledger/days/${day(2)}/export`, headers: { api_key: reader } })).body;
    expect(jsonl).toContain('"job_id":"=HYPERLINK(\\"http://x.example\\",\\"y\\")"');
  });

  it('answers what is not there, and whom it is not for, with the right status', async () => {
    await start();
    await t.app.ledger.closer!.closeDue();
    const get = (u: string, key?: string) => t.app.inject({ url: u, headers: key ? { api_key: key } : {} });
    const open = await get(`/ledger/days/${day(1)}`);
    expect(open.statusCode).toBe(404);
    expect(open.json().detail).toBe(
      `Day ${day(1)} is not closed yet: it closes once ${day(-1)}T00:00:00Z has passed (its end plus 24 h in which verification may still take its credits back; servers look every hour)`,
    );
    expect((await get(`/ledger/days/${day(9)}`)).json().detail).toBe(`The ledger starts on ${day(5)}: ${day(9)} is before its first day`);
    expect((await get('/ledger/days/2026-02-30')).statusCode).toBe(422);
    expect((await get('/ledger/days/yesterday/export', reader)).json().detail[0]).toMatchObject({ type: 'value_error', loc: ['path', 'day'] });
    expect((await get(`/ledger/days/${day(3)}/nodes/alpha`)).statusCode).toBe(401);
    expect((await get(`/ledger/days/${day(3)}/nodes/alpha`, keys.beta)).statusCode).toBe(403);
    expect((await get(`/ledger/days/${day(3)}/nodes/nobody`, reader)).statusCode).toBe(404);
    expect((await get(`/ledger/days/${day(3)}/export`)).statusCode).toBe(401);
    expect((await get(`/ledger/days/${day(3)}/export`, keys.alpha)).statusCode).toBe(403);
    expect((await get(`/ledger/days/${day(1)}/export`, reader)).statusCode).toBe(404);
    expect((await get('/ledger/days?last_days=0')).statusCode).toBe(422);
    // Any day, node name or format: an answer, never a 5xx.
    await fc.assert(
      fc.asyncProperty(
        fc.string({ maxLength: 40 }),
        fc.string({ maxLength: 140 }),
        fc.constantFrom(undefined, reader, keys.alpha!, 'nk_nope'),
        fc.string({ maxLength: 8 }),
        async (d, name, key, format) => {
          for (const u of [
            `/ledger/days/${encodeURIComponent(d)}`,
            `/ledger/days/${encodeURIComponent(d)}/nodes/${encodeURIComponent(name)}`,
            `/ledger/days/${encodeURIComponent(d)}/export?format=${encodeURIComponent(format)}`,
            `/ledger/days/${day(3)}/nodes/${encodeURIComponent(name)}`,
          ]) {
            expect((await get(u, key)).statusCode, u).toBeLessThan(500);
          }
        },
      ),
      { numRuns: 60, seed: 24 },
    );
  });

  it('names each change made by hand after closing: the day, the node and the entry', async () => {
    await start();
    await t.app.ledger.closer!.closeDue();
    await q('t_credit', "UPDATE job_results SET points = 7 WHERE job_id = 'j-3-alpha-5'");
    await q('t_reversal', "UPDATE point_reversals SET points = 1 WHERE job_id = 'j-3-beta-0'");
    await q('t_gone', "UPDATE job_results SET status = 'error' WHERE job_id = 'j-5-gamma 🚀-0'");
    await q('t_total', 'UPDATE node_daily_points SET points = points + 1 WHERE day = $1::date AND node_id = $2::bigint', [day(2), ids.beta]);
    await q('t_bump', 'UPDATE points_history SET version = version + 1');

    const expected = [
      `day ${day(5)}, node gamma 🚀: credits: 7 now, 8 when the day closed`,
      `day ${day(3)}, node alpha, entry credit j-3-alpha-5: changed since the day closed`,
      `day ${day(3)}, node beta, entry reversal j-3-beta-0: changed since the day closed`,
      `day ${day(2)}, node beta: daily_points`,
    ];
    const exported = (await verifyLedger({ server: url, key: reader, days: 30 })).differences.map(describeDifference);
    for (const e of expected) expect(exported.some((d) => d.startsWith(e))).toBe(true);
    expect(exported.some((d) => d.startsWith(`day ${day(5)}, node gamma 🚀: entry 1 of 8 when the day closed is gone`))).toBe(true);
    const database = (await checkDatabase(t.db, 30)).differences.map(describeDifference);
    for (const e of expected) expect(database.some((d) => d.startsWith(e))).toBe(true);

    // The operator's command on the database says the same and exits 1.
    const io = bufferIo();
    expect(await runCommand(t.db, ['ledger', 'verify', '--days', '30'], io)).toBe(1);
    expect(io.stdout).toContain(`day ${day(3)}, node alpha, entry credit j-3-alpha-5: changed since the day closed`);
    expect(io.stderr.at(-1)).toMatch(/^ins: \d+ differences in the ledger$/);

    // A node's own check names its own entries; the command says it and exits 1.
    const out: string[] = [];
    expect(
      await runLedgerVerify(
        ['--server', url, '--node', 'alpha', '--key', keys.alpha!, '--days', '5'],
        (l) => out.push(l),
        (l) => out.push(l),
      ),
    ).toBe(1);
    expect(out).toContain(`day ${day(3)}, node alpha, entry credit j-3-alpha-5: changed since the day closed`);
    expect(out.slice(-2)).toEqual([expect.stringMatching(/^\d+ differences?$/), expect.stringMatching(/^ins: \d+ differences? in the ledger$/)]);
    out.length = 0;
    expect(
      await runLedgerVerify(
        ['--server', url, '--node', 'gamma 🚀', '--key', keys['gamma 🚀']!, '--days', '1'],
        (l) => out.push(l),
        (l) => out.push(l),
      ),
    ).toBe(0);
    expect(out.at(-1)).toBe('everything verifies');

    // A signed total changed in the ledger's own rows: the public check sees the root broken.
    await q('t_ledger_total', "UPDATE ledger_day_nodes SET credited = credited + 1 WHERE day = $1::date AND name = 'alpha'", [day(2)]);
    t.app.ledger.reader.forget();
    const pub = (await verifyLedger({ server: url, days: 30 })).differences.map(describeDifference);
    expect(pub).toContain(`day ${day(2)}: the node totals no longer give the signed root (a total was changed)`);
  });

  it('ends with the same summary and exit code on the database and with --server: nothing differs, then a difference', async () => {
    await start();
    await t.app.ledger.closer!.closeDue();
    // The two commands as `ins` runs them: on the database (src/cli/ledger-commands.ts) and over
    // HTTP (src/ledger-client/cli.ts, which main.ts runs for --server).
    const local = async (args: string[]) => {
      const io = bufferIo();
      return { code: await runCommand(t.db, ['ledger', 'verify', '--days', '30', ...args], io), out: io.stdout, err: io.stderr };
    };
    const remote = async (args: string[]) => {
      const out: string[] = [];
      const err: string[] = [];
      return {
        code: await runLedgerVerify(
          ['--server', url, '--days', '30', ...args],
          (l) => out.push(l),
          (l) => err.push(l),
        ),
        out,
        err,
      };
    };
    const modes = [
      ['--key', reader],
      ['--node', 'alpha', '--key', keys.alpha!],
    ];
    for (const r of [await local([]), ...(await Promise.all(modes.map(remote)))]) {
      expect(r).toMatchObject({ code: 0, err: [] });
      expect(r.out.at(-1)).toBe('everything verifies');
    }

    await q('t_credit', "UPDATE job_results SET points = 7 WHERE job_id = 'j-3-alpha-5'");
    for (const json of [false, true]) {
      const args = json ? ['--json'] : [];
      for (const r of [await local(args), ...(await Promise.all(modes.map((m) => remote([...m, ...args]))))]) {
        expect(r.code).toBe(1);
        const differences = json
          ? (JSON.parse(r.out[0]!) as { differences: unknown[] }).differences.length
          : Number(/^(\d+) differences?$/.exec(r.out.at(-1)!)?.[1]);
        expect(differences).toBeGreaterThan(0);
        const summary = `${differences} difference${differences === 1 ? '' : 's'} in the ledger`;
        expect(r.err).toEqual([`ins: ${summary}`]);
        if (json) expect(r.out).toEqual([r.out[0], JSON.stringify({ error: summary })]);
      }
    }
  });

  it('puts a reversal made after its day closed on the day it is made, and everything still adds up', async () => {
    await start();
    await t.app.ledger.closer!.closeDue();
    const before = (await t.app.inject({ url: `/ledger/days/${day(3)}` })).json();
    expect(await t.db.transaction((tx) => reverse(tx, { jobIds: ['j-3-alpha-5', 'j-1-alpha-0', 'j-0-alpha-0'] }, 'strike'))).toEqual({
      results: 3,
      points: 3.25,
    });
    const placed = await q<{ job_id: string; day: string }>(
      't_placed',
      "SELECT job_id, day::text FROM point_reversals WHERE reason = 'strike' AND job_id LIKE 'j-%alpha%' ORDER BY job_id",
    );
    // The closed day's credit: today; the open days' credits: their own days.
    expect(placed).toEqual([
      { job_id: 'j-0-alpha-0', day: day(0) },
      { job_id: 'j-1-alpha-0', day: day(1) },
      { job_id: 'j-3-alpha-5', day: day(0) },
    ]);
    expect((await t.app.inject({ url: `/ledger/days/${day(3)}` })).json()).toEqual(before);
    const daily = (
      await t.app.inject({ method: 'POST', url: '/daily_points', headers: { api_key: reader }, payload: { node_name: 'alpha', last_days: 4 } })
    ).json();
    expect(daily).toEqual([
      { date: day(3), points: 4.5 },
      { date: day(2), points: 7.5 },
      { date: day(1), points: 4.5 },
      { date: day(0), points: 2.75 },
    ]);
    expect((await verifyLedger({ server: url, key: reader, days: 30 })).differences).toEqual([]);
    expect((await checkDatabase(t.db, 30)).differences).toEqual([]);
    const { stored, recomputed } = await aggregatesAndRecomputation(t.db);
    expect(stored).toEqual(recomputed);
  });

  it('computes a day again when a reversal lands while it is read, so the reversal is on exactly one side', async () => {
    await start();
    let raced = false;
    // Pages of 3 entries: nodes read a page at a time and several to a statement (the export below reads with its own).
    const report = await closeDueDays(t.db, {
      key: await loadLedgerKey(t.db),
      window: 86_400,
      server: 'test',
      pageSize: 3,
      afterCompute: async (d) => {
        if (d !== day(3) || raced) return;
        raced = true;
        expect(await t.db.transaction((tx) => reverse(tx, { jobIds: ['j-3-gamma 🚀-2'] }, 'strike'))).toMatchObject({ results: 1 });
      },
    });
    expect(report).toMatchObject({ closed: [day(5), day(4), day(3), day(2)], recomputed: 1 });
    expect(await q('t_day', "SELECT day::text FROM point_reversals WHERE job_id = 'j-3-gamma 🚀-2'")).toEqual([{ day: day(3) }]);
    expect((await t.app.inject({ url: `/ledger/days/${day(3)}` })).json()).toMatchObject({ reversals: 2 });
    expect((await verifyLedger({ server: url, key: reader, days: 30 })).differences).toEqual([]);
  });

  it.runIf(backend.name === 'postgres')('makes a reversal that waits on a closing day land on the day it is made', async () => {
    await start();
    let late: Promise<unknown> | undefined;
    const report = await closeDueDays(t.db, {
      key: await loadLedgerKey(t.db),
      window: 86_400,
      server: 'test',
      beforeCommit: async (d) => {
        if (d !== day(3) || late) return;
        // Another connection reverses a credit of the day being committed: it must wait for the lock.
        late = t.db.transaction((tx) => reverse(tx, { jobIds: ['j-3-gamma 🚀-2'] }, 'strike'));
        await until(
          'the reversal to wait for the closing day',
          async () =>
            (
              await t.db.query<{ n: number }>(
                sql(
                  't_waiting',
                  `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE wait_event_type = 'Lock' AND query LIKE '%ledger_state FOR SHARE%'`,
                ),
              )
            )[0]!.n === 1,
        );
      },
    });
    expect(report.closed).toContain(day(3));
    await late;
    expect(await q('t_day', "SELECT day::text FROM point_reversals WHERE job_id = 'j-3-gamma 🚀-2'")).toEqual([{ day: day(0) }]);
    expect((await t.app.inject({ url: `/ledger/days/${day(3)}` })).json()).toMatchObject({ reversals: 1 });
    expect((await verifyLedger({ server: url, key: reader, days: 30 })).differences).toEqual([]);
  });

  it('keeps its key in LEDGER_KEY_FILE when given one, refuses another, and a server without the private key closes nothing', async () => {
    const file = path.join(dir, `${backend.name}-key.pem`);
    rmSync(file, { force: true });
    t = await startApp(backend, { ledger: { keyFile: file } });
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const published = (await t.app.inject({ url: '/ledger/key' })).json();
    expect(createPublicKey(createPrivateKey(readFileSync(file, 'utf8'))).export({ format: 'jwk' }).x).toBe(
      Buffer.from(published.public_key, 'base64').toString('base64url'),
    );
    expect(await q('t_key', 'SELECT private_pem FROM ledger_key')).toEqual([{ private_pem: null }]);
    const other = path.join(dir, `${backend.name}-other.pem`);
    writeFileSync(other, generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }));
    await expect(buildApp({ db: t.db, ledger: { keyFile: other } })).rejects.toThrow(`holds key`);
    // Without the file: it serves the ledger's public key and closes no day.
    const keyless = await buildApp({ db: t.db, verify: { enabled: false } });
    try {
      expect((await keyless.inject({ url: '/ledger/key' })).json()).toEqual(published);
      ids.solo = (await q<{ id: number }>('t_solo', "INSERT INTO nodes (name, key_hash) VALUES ('solo', repeat('a', 64)) RETURNING id::int"))[0]!.id;
      await credit('solo', 'solo-1', at(3, '10:00:00'));
      expect(await keyless.ledger.closer.closeDue()).toMatchObject({ closed: [] });
      expect(await t.app.ledger.closer.closeDue()).toMatchObject({ closed: [day(3), day(2)] });
    } finally {
      await keyless.close();
    }
  });

  it('closes in slices, resting between them while live results land, and signs exactly what an unpaced close would', async () => {
    await start();
    // A clock that moves one unit a look: every step after the first ends a slice.
    let clock = 0;
    const rests: number[] = [];
    let live = 0;
    const events = {
      closed: () => {},
      error: (err: unknown) => {
        throw err;
      },
      cannotSign: () => {},
    };
    const closer = new DayCloser(
      t.db,
      t.app.ledger.keys,
      {
        window: 86_400,
        server: 'paced',
        pageSize: 3,
        pace: {
          sliceMs: 1,
          restRatio: 4,
          now: () => clock++,
          // Live traffic in each rest: a credit of today (not due), as update_result would record it.
          rest: async (ms) => {
            rests.push(ms);
            await credit('beta', `live-${live++}`, new Date().toISOString());
          },
        },
      },
      events,
    );
    const report = await closer.closeDue();
    await closer.close();
    expect(report).toMatchObject({ closed: [day(5), day(4), day(3), day(2)], recomputed: 0, disagreements: [] });
    // Slices: pages of 3 entries, a rest after each step (several a day), each 4 times its slice.
    expect(rests.length).toBeGreaterThan(2 * report!.closed.length);
    expect(new Set(rests)).toEqual(new Set([4]));
    // Exact: every root, total and signature recomputes from the entries and equals daily_points.
    expect((await verifyLedger({ server: url, key: reader, days: 30 })).differences).toEqual([]);
    expect((await checkDatabase(t.db, 30)).differences).toEqual([]);
    expect((await t.app.inject({ url: `/ledger/days/${day(3)}` })).json()).toMatchObject({
      credits: 3 * 6 + 2,
      reversals: 1,
      credited: '7.5',
      reversed: '0.25',
    });
    const daily = (
      await t.app.inject({ method: 'POST', url: '/daily_points', headers: { api_key: reader }, payload: { node_name: 'beta', last_days: 1 } })
    ).json<{ points: number }[]>();
    expect(daily).toEqual([{ date: day(0), points: 1.5 * (3 + live) }]);
  });

  it('stops closing at once when the server stops, even in the middle of a long rest', async () => {
    await start();
    const events = {
      closed: () => {},
      error: (err: unknown) => {
        throw err;
      },
      cannotSign: () => {},
    };
    // Every slice is followed by a rest of days: only stopping can end it.
    let resting = false;
    const closer = new DayCloser(
      t.db,
      t.app.ledger.keys,
      {
        window: 86_400,
        server: 'stopped',
        pace: {
          sliceMs: 0,
          restRatio: 1e5,
          resting: (ms) => {
            resting ||= ms > 60_000;
          },
        },
      },
      events,
    );
    const running = closer.closeDue();
    await until('a long rest', () => resting);
    await closer.close();
    const report = await running;
    expect(report === undefined || report.closed.length < 4).toBe(true);
  });

  it('closes imported history like reported history, and refuses history for a day already closed', async () => {
    await start();
    const file = (name: string, rows: string[]) => {
      const f = path.join(dir, `${backend.name}-${name}.csv`);
      writeFileSync(f, ['job_id,node_name,model_name,status,points,received_at', ...rows].join('\n'));
      return f;
    };
    const opts = { skipBadRows: false, progress: false };
    await runImport(
      t.db,
      file('old', [
        `imp-1,alpha,m-c,success,2,${at(6, '10:00:00')}`,
        `imp-2,beta,m-c,success,0.5,${at(3, '23:59:59.999999')}`,
        `imp-3,beta,m-c,error,0,${at(3, '01:00:00')}`,
      ]),
      resultsImport,
      opts,
    );
    expect((await t.app.ledger.closer!.closeDue())!.closed[0]).toBe(day(6));
    expect((await verifyLedger({ server: url, key: reader, days: 30 })).differences).toEqual([]);
    expect((await verifyLedger({ server: url, node: 'beta', key: keys.beta!, days: 30 })).differences).toEqual([]);

    const late = file('late', [`imp-4,alpha,m-c,success,2,${at(1, '10:00:00')}`, `imp-5,alpha,m-c,success,2,${at(2, '10:00:00')}`]);
    const refused = await runImport(t.db, late, resultsImport, opts).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ImportRejected);
    expect((refused as ImportRejected).examples).toEqual([
      {
        line: 3,
        reason: `received_at falls on ${day(2)}, a day the points ledger has closed (closed through ${day(2)}): a closed day never changes; import history before its day closes (docs/ledger.md)`,
      },
    ]);
    expect(await runImport(t.db, late, resultsImport, { ...opts, skipBadRows: true })).toMatchObject({ imported: 1, bad_rows: 1 });
    expect((await checkDatabase(t.db, 30)).differences).toEqual([]);
  });
});
