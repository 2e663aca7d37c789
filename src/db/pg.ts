// PostgreSQL over a pg.Pool. Connection loss and timeouts surface as errors that
// db/errors.ts maps to 503; a query never waits forever for a connection.
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { StatementObservers, type Database, type Queryable, type Sql } from './database.js';
import { isRetryable } from './errors.js';

// int8 (e.g. count(*)) as JS numbers: every count here fits in 2^53.
pg.types.setTypeParser(pg.types.builtins.INT8, (v: string) => Number(v));

export interface PgOptions {
  connectionString: string;
  max?: number;
  connectionTimeoutMillis?: number;
  statementTimeoutMillis?: number;
}

const MAX_ATTEMPTS = 5;

// A serialization failure or deadlock committed nothing, so the whole attempt — one
// autocommit statement, or one transaction — is safe to run again.
async function retrying<T>(attempt: () => Promise<T>): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      if (n < MAX_ATTEMPTS && isRetryable(err)) continue;
      throw err;
    }
  }
}

function wrap(client: pg.PoolClient | pg.Pool, observers: StatementObservers): Queryable {
  const inTransaction = client instanceof pg.Pool ? {} : { copyFrom: (copySql: string) => client.query(copyFrom(copySql)) };
  return {
    ...inTransaction,
    async query<R>(s: Sql, values: readonly unknown[] = []): Promise<R[]> {
      const res = await observers.time(s.name, () => client.query({ name: s.name, text: s.text, values: values as unknown[] }));
      return res.rows as R[];
    },
    async exec(text: string): Promise<void> {
      await client.query(text);
    },
  };
}

export function describeUrl(connectionString: string): string {
  try {
    const u = new URL(connectionString);
    return `postgresql://${u.username ? `${decodeURIComponent(u.username)}@` : ''}${u.host}${u.pathname}`;
  } catch {
    return 'postgresql (unparseable DATABASE_URL)';
  }
}

const RECONNECT_MS = 1_000;

// LISTEN needs a connection of its own that outlives any query; when it drops, notifications
// may be lost, so the caller hears onLive(false) until a new connection listens again.
async function listenWithReconnect(opts: PgOptions, channel: string, onNotify: (payload: string) => void, onLive: (live: boolean) => void): Promise<() => Promise<void>> {
  let stopped = false;
  let current: pg.Client | undefined;
  let timer: NodeJS.Timeout | undefined;
  const retry = () => {
    onLive(false);
    current = undefined;
    if (!stopped) timer = setTimeout(() => void connect(), RECONNECT_MS);
  };
  const connect = async (): Promise<void> => {
    const client = new pg.Client({ connectionString: opts.connectionString, keepAlive: true, connectionTimeoutMillis: opts.connectionTimeoutMillis ?? 5_000 });
    let failed = false;
    const fail = () => {
      if (failed) return;
      failed = true;
      client.end().catch(() => {});
      retry();
    };
    client.on('notification', (m) => m.channel === channel && onNotify(m.payload ?? ''));
    client.on('error', fail);
    client.on('end', fail);
    try {
      await client.connect();
      await client.query(`LISTEN ${channel}`);
      if (stopped) return void client.end().catch(() => {});
      current = client;
      onLive(true);
    } catch {
      fail();
    }
  };
  await connect();
  return async () => {
    stopped = true;
    clearTimeout(timer);
    onLive(false);
    const c = current;
    current = undefined;
    await c?.end().catch(() => {});
  };
}

export function openPostgres(opts: PgOptions): Database {
  const pool = new pg.Pool({
    connectionString: opts.connectionString,
    max: opts.max ?? 20,
    connectionTimeoutMillis: opts.connectionTimeoutMillis ?? 5_000,
    statement_timeout: opts.statementTimeoutMillis ?? 15_000,
    // Detect a dead server on idle connections instead of hanging on them.
    keepAlive: true,
    // No JIT: our statements are short, and one whose estimate crosses jit_above_cost (the
    // auditor's take, estimated from stale statistics of a queue table) spent 26 ms compiling
    // to run for 3 (docs/verification.md, Cost). Set on each new connection before the pool
    // hands it out (a failure fails that checkout) rather than as a startup option, which
    // connection poolers such as PgBouncer refuse.
    // pg-pool awaits this hook; @types/pg declares it as returning void.
    // eslint-disable-next-line @typescript-eslint/no-misused-promises
    onConnect: async (client) => { await client.query('SET jit = off'); },
  });
  // An idle client losing its connection must not crash the process; the pool drops it.
  pool.on('error', () => {});
  const observers = new StatementObservers();
  const base = wrap(pool, observers);
  return {
    kind: 'postgres',
    description: describeUrl(opts.connectionString),
    // Outside a transaction each statement commits on its own (e.g. a batch of new results).
    query: (s, values) => retrying(() => base.query(s, values)),
    exec: (text) => base.exec(text),
    transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
      return retrying(async () => {
        const client = await pool.connect();
        let broken = false;
        try {
          await client.query('BEGIN');
          const out = await fn(wrap(client, observers));
          await client.query('COMMIT');
          return out;
        } catch (err) {
          try {
            await client.query('ROLLBACK');
          } catch {
            broken = true;
          }
          throw err;
        } finally {
          client.release(broken);
        }
      });
    },
    listen: (channel, onNotify, onLive) => listenWithReconnect(opts, channel, onNotify, onLive),
    observeStatements: (fn) => observers.add(fn),
    poolStats: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
    close: () => pool.end(),
  };
}
