// PostgreSQL over a pg.Pool, directly or through a connection pooler in transaction mode
// (PgBouncer; docs/operations.md, "Behind PgBouncer"). Connection loss and timeouts surface
// as errors that db/errors.ts maps to 503; a query never waits forever for a connection.
//
// Through a transaction pooler each transaction may run on another server connection, so
// nothing may rest on the session: no startup parameters (PgBouncer refuses them), no named
// prepared statements (PgBouncer before 1.21 cannot carry them; pg would reuse a name on a
// connection that never saw it), settings per transaction (SET LOCAL), and LISTEN on a direct
// connection of its own (DATABASE_DIRECT_URL). `pooler: 'auto'` starts direct and switches
// for good the first time a pooler shows itself by refusing exactly these.
import { EventEmitter } from 'node:events';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { DatabasePooler } from '../config.js';
import { sql, StatementObservers, type Database, type Queryable, type Sql } from './database.js';
import { isRetryable, pgCode } from './errors.js';

// int8 (e.g. count(*)) as JS numbers: every count here fits in 2^53.
pg.types.setTypeParser(pg.types.builtins.INT8, (v: string) => Number(v));

export interface PgOptions {
  connectionString: string;
  /** A direct connection for LISTEN when connectionString is a transaction pooler. */
  directConnectionString?: string;
  /** none: connections are direct; transaction: a pooler in transaction mode; auto (default): direct until a pooler shows itself. */
  pooler?: DatabasePooler;
  max?: number;
  connectionTimeoutMillis?: number;
  statementTimeoutMillis?: number;
  /** Told what the operator should know: a pooler detected, LISTEN without a direct connection, database defaults to set. */
  onWarning?: (message: string) => void;
}

const MAX_ATTEMPTS = 5;
const RECONNECT_MS = 1_000;

/** PgBouncer refusing a startup parameter: `unsupported startup parameter: statement_timeout`. */
function refusedStartupParameter(err: unknown): boolean {
  return pgCode(err) === '08P01' && /unsupported startup parameter/i.test((err as Error).message);
}

/** A named statement missing on, or already on, the server connection: a pooler swapped it. */
function preparedStatementMismatch(err: unknown): boolean {
  const code = pgCode(err);
  return code === '26000' || code === '42P05';
}

// Through a pooler, single statements run with the database's own defaults: say which to set.
const DEFAULTS = sql(
  'pooler_defaults',
  "SELECT current_database() AS db, current_setting('statement_timeout') AS timeout, current_setting('jit') AS jit",
);

export function describeUrl(connectionString: string): string {
  try {
    const u = new URL(connectionString);
    return `postgresql://${u.username ? `${decodeURIComponent(u.username)}@` : ''}${u.host}${u.pathname}`;
  } catch {
    return 'postgresql (unparseable DATABASE_URL)';
  }
}

// Statements marked `plan: 'generic'` (db/database.ts) run on a connection of their own whose
// plan_cache_mode is force_generic_plan: jobs_lease's custom plan cost about 2 ms of planning
// at every execution, as much as it ran, and PostgreSQL never switched to the generic plan,
// which runs as fast (docs/benchmarks.md, "jobs_lease planned once, …"). The connection lives at
// most GENERIC_LIFETIME_S: a generic plan is kept until the statistics of its tables change, and
// where they never do (autovacuum off) a plan made when the tables were small would stay;
// a new connection plans again with the tables' sizes as they are. One connection: the
// dispatcher runs one lease round at a time (jobs/dispatcher.ts). Through a transaction pooler
// statements are unnamed and planned at each execution anyway: no such connection.
const GENERIC_LIFETIME_S = 10;

class Connections {
  pooled: boolean;
  pool: pg.Pool;
  private genericPool: pg.Pool | undefined;
  private readonly onPooled = new Set<() => void>();
  private readonly warned = new Set<string>();

  constructor(private readonly opts: PgOptions) {
    this.pooled = opts.pooler === 'transaction';
    this.pool = this.makePool();
    if (this.pooled) this.checkDefaults();
  }

  /** The pool for statements planned generically: undefined through a pooler. */
  generic(): pg.Pool | undefined {
    if (this.pooled) return undefined;
    return (this.genericPool ??= this.makePool({
      max: 1,
      maxLifetimeSeconds: GENERIC_LIFETIME_S,
      settings: 'SET jit = off; SET plan_cache_mode = force_generic_plan',
    }));
  }

  async end(): Promise<void> {
    await Promise.all([this.pool.end(), this.genericPool?.end()]);
  }

  private makePool(p: { max?: number; maxLifetimeSeconds?: number; settings?: string } = {}): pg.Pool {
    const o = this.opts;
    const settings = p.settings ?? 'SET jit = off';
    const pool = new pg.Pool({
      connectionString: o.connectionString,
      max: p.max ?? o.max ?? 20,
      // 0: for good (pg-pool's default).
      maxLifetimeSeconds: p.maxLifetimeSeconds ?? 0,
      connectionTimeoutMillis: o.connectionTimeoutMillis ?? 5_000,
      // Detect a dead server on idle connections instead of hanging on them.
      keepAlive: true,
      // Direct connections carry the settings for their whole life: the timeout as a startup
      // parameter, and no JIT: our statements are short, and one whose estimate crosses
      // jit_above_cost (the auditor's take, estimated from stale statistics of a queue table)
      // spent 26 ms compiling to run for 3 (docs/verification.md, Cost). Through a pooler the
      // transactions set both (BEGIN below) and single statements get the database's defaults.
      ...(this.pooled
        ? {}
        : {
            statement_timeout: o.statementTimeoutMillis ?? 15_000,
            // pg-pool awaits this hook; @types/pg declares it as returning void.
            // eslint-disable-next-line @typescript-eslint/no-misused-promises
            onConnect: async (client: pg.ClientBase) => {
              await client.query(settings);
            },
          }),
    });
    // An idle client losing its connection must not crash the process; the pool drops it.
    pool.on('error', () => {});
    return pool;
  }

  warn(message: string): void {
    if (this.warned.has(message)) return;
    this.warned.add(message);
    this.opts.onWarning?.(message);
  }

  /** Called once if the connections turn out to go through a pooler (listeners reconnect). */
  whenPooled(fn: () => void): () => void {
    this.onPooled.add(fn);
    return () => this.onPooled.delete(fn);
  }

  /**
   * In auto mode, whether err shows a pooler (then the failed attempt ran nothing and may run
   * again); the first such error switches every later statement to the pooler's way.
   */
  detect(err: unknown): boolean {
    if (this.opts.pooler !== 'auto' || (!refusedStartupParameter(err) && !preparedStatementMismatch(err))) return false;
    // Statements that failed together all retry; the first one switches.
    if (this.pooled) return true;
    this.pooled = true;
    const old = this.pool;
    this.pool = this.makePool();
    // Clients checked out of the old pools finish their work; end() closes each as it comes back.
    void old.end().catch(() => {});
    if (this.genericPool) void this.genericPool.end().catch(() => {});
    this.genericPool = undefined;
    this.warn(
      `DATABASE_URL goes through a connection pooler in transaction mode (${(err as Error).message}): using unnamed statements and per-transaction settings; set DATABASE_POOLER=transaction to say so${this.opts.directConnectionString ? '' : ', and DATABASE_DIRECT_URL for LISTEN'}`,
    );
    for (const fn of this.onPooled) fn();
    this.checkDefaults();
    return true;
  }

  private checkDefaults(): void {
    const timeout = this.opts.statementTimeoutMillis ?? 15_000;
    this.pool.query<{ db: string; timeout: string; jit: string }>(DEFAULTS.text).then(
      ({ rows: [r] }) => {
        if (!r || (r.timeout !== '0' && r.jit === 'off')) return;
        const db = `"${r.db.replaceAll('"', '""')}"`;
        this.warn(
          `through a transaction pooler, statements outside transactions run with the database's defaults (statement_timeout ${r.timeout}, jit ${r.jit}); set them once: ALTER DATABASE ${db} SET statement_timeout = '${timeout}ms'; ALTER DATABASE ${db} SET jit = off;`,
        );
      },
      () => {
        /* the database is down: the first statement will say so */
      },
    );
  }

  /** The URL LISTEN connects to, or undefined when there is no direct connection. */
  listenUrl(): string | undefined {
    return this.opts.directConnectionString ?? (this.pooled ? undefined : this.opts.connectionString);
  }
}

// A serialization failure or deadlock committed nothing, so the whole attempt — one
// autocommit statement, or one transaction — is safe to run again; so is one a pooler failed
// before it ran (a refused startup parameter, a prepared statement on the wrong connection).
async function retrying<T>(c: Connections, attempt: () => Promise<T>): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      if (n < MAX_ATTEMPTS && (isRetryable(err) || c.detect(err))) continue;
      throw err;
    }
  }
}

function wrap(c: Connections, client: pg.PoolClient | pg.Pool, observers: StatementObservers): Queryable {
  const inTransaction = client instanceof pg.Pool ? {} : { copyFrom: (copySql: string) => client.query(copyFrom(copySql)) };
  return {
    ...inTransaction,
    async query<R>(s: Sql, values: readonly unknown[] = []): Promise<R[]> {
      // Named: pg prepares the statement once per connection. Unnamed through a pooler.
      const res = await observers.time(s.name, () =>
        client.query({ ...(c.pooled ? {} : { name: s.name }), text: s.text, values: values as unknown[] }),
      );
      return res.rows as R[];
    },
    async exec(text: string): Promise<void> {
      await client.query(text);
    },
  };
}

// LISTEN needs a connection of its own that outlives any query; when it drops, notifications
// may be lost, so the caller hears onLive(false) until a new connection listens again (after
// RECONNECT_MS). Without a direct connection (a pooler and no DATABASE_DIRECT_URL) it never
// listens: callers stay in their "notifications may be missed" mode.
async function listenWithReconnect(
  c: Connections,
  opts: PgOptions,
  channel: string,
  onNotify: (payload: string) => void,
  onLive: (live: boolean) => void,
): Promise<() => Promise<void>> {
  let stopped = false;
  let current: pg.Client | undefined;
  let timer: NodeJS.Timeout | undefined;
  const retry = () => {
    onLive(false);
    current = undefined;
    if (!stopped)
      timer = setTimeout(() => {
        connect().catch(retry);
      }, RECONNECT_MS);
  };
  const connect = async (): Promise<void> => {
    const url = c.listenUrl();
    if (url === undefined) {
      c.warn(
        'no LISTEN through a transaction pooler: set DATABASE_DIRECT_URL to a direct connection; until then servers do not hear each other (docs/operations.md, "Behind PgBouncer")',
      );
      return;
    }
    const client = new pg.Client({ connectionString: url, keepAlive: true, connectionTimeoutMillis: opts.connectionTimeoutMillis ?? 5_000 });
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
  // A LISTEN made before the pooler showed itself went through it: it hears nothing. Drop it.
  const forget = c.whenPooled(() => {
    const old = current;
    if (old && c.listenUrl() === undefined) void old.end().catch(() => {});
  });
  await connect();
  return async () => {
    stopped = true;
    forget();
    clearTimeout(timer);
    onLive(false);
    const cur = current;
    current = undefined;
    await cur?.end().catch(() => {});
  };
}

export function openPostgres(opts: PgOptions): Database {
  const c = new Connections({ pooler: 'auto', ...opts });
  const observers = new StatementObservers();
  return {
    kind: 'postgres',
    description: describeUrl(opts.connectionString) + (opts.directConnectionString ? ` (LISTEN on ${describeUrl(opts.directConnectionString)})` : ''),
    // Outside a transaction each statement commits on its own (e.g. a batch of new results).
    query: (s, values) => retrying(c, () => wrap(c, (s.plan === 'generic' && c.generic()) || c.pool, observers).query(s, values)),
    exec: (text) => retrying(c, () => c.pool.query(text).then(() => undefined)),
    transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
      return retrying(c, async () => {
        const client = await c.pool.connect();
        let broken = false;
        // pg-pool takes its own 'error' listener off a client it lends: a connection lost between
        // two statements of the transaction (a backend terminated, a failover) would emit 'error'
        // with no one listening, which ends the process (an outside probe: pg_terminate_backend
        // every 0.2 s, an idle server gone in 40 s). The next statement fails instead, and the
        // client is dropped.
        const lost = () => {
          broken = true;
        };
        client.on('error', lost);
        try {
          // One round trip either way: through a pooler the settings come with BEGIN.
          await client.query(
            c.pooled ? `BEGIN; SET LOCAL statement_timeout = ${opts.statementTimeoutMillis ?? 15_000}; SET LOCAL jit = off` : 'BEGIN',
          );
          const out = await fn(wrap(c, client, observers));
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
          client.removeListener('error', lost);
          client.release(broken);
        }
      });
    },
    listen: (channel, onNotify, onLive) => listenWithReconnect(c, opts, channel, onNotify, onLive),
    events: new EventEmitter(),
    observeStatements: (fn) => observers.add(fn),
    poolStats: () => ({ total: c.pool.totalCount, idle: c.pool.idleCount, waiting: c.pool.waitingCount }),
    close: () => c.end(),
  };
}
