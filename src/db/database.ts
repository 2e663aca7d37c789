// The one database interface the repositories use: `query` and `transaction`, implemented by
// pg.Pool (DATABASE_URL) and by embedded PGlite (DATA_DIR). The SQL above it is the same for
// both, so every query casts its results explicitly (int8/numeric/date come back as JS numbers
// and strings the same way on both backends).

import type { EventEmitter } from 'node:events';
import type { Writable } from 'node:stream';

/**
 * A named, parameterised statement. The name lets pg prepare it once and labels the
 * per-statement duration metric (ins_db_statement_duration_seconds, http/metrics.ts).
 */
export interface Sql {
  readonly name: string;
  readonly text: string;
  /**
   * generic: planned once per connection, not at every execution (PostgreSQL's plan cache keeps
   * re-planning a statement whose generic plan it estimates dearer than its custom ones). On
   * direct PostgreSQL connections outside transactions; elsewhere as any statement (db/pg.ts).
   */
  readonly plan?: 'generic';
}

export interface Queryable {
  query<R>(sql: Sql, values?: readonly unknown[]): Promise<R[]>;
  /** Runs several statements without parameters (migrations). */
  exec(text: string): Promise<void>;
  /**
   * PostgreSQL inside a transaction only: a stream for `COPY … FROM STDIN` (text format).
   * Bulk loaders fall back to batched inserts where it is absent (PGlite).
   */
  copyFrom?(copySql: string): Writable;
}

export interface Database extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  /** Where the data lives, safe to log (no password). */
  readonly description: string;
  /** Runs fn in one transaction; commits when it resolves (durably, before returning). */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /**
   * Calls onNotify with the payload of every NOTIFY on channel (a constant, never input). onLive(true) once
   * delivery is reliable, onLive(false) whenever it may have missed one (connection lost; it
   * reconnects by itself). Resolves to a stop function.
   */
  listen(channel: string, onNotify: (payload: string) => void, onLive: (live: boolean) => void): Promise<() => Promise<void>>;
  /**
   * In-process events among this database's users, heard synchronously (before the change's
   * caller gets its answer): e.g. key changes (repositories/key-events.ts). One per open
   * database, so two apps in one process share nothing but the database they share.
   */
  readonly events: EventEmitter;
  /** Calls fn after every statement with its name and duration; returns the unsubscribe function. */
  observeStatements(fn: StatementObserver): () => void;
  /** Pool gauges for metrics; PGlite has a single in-process connection. */
  poolStats(): { total: number; idle: number; waiting: number };
  close(): Promise<void>;
}

export const sql = (name: string, text: string, o: { plan?: 'generic' } = {}): Sql => (o.plan ? { name, text, plan: o.plan } : { name, text });

export type StatementObserver = (name: string, seconds: number) => void;

/** The observers of one database; timing costs nothing while there are none. */
export class StatementObservers {
  private readonly observers = new Set<StatementObserver>();

  add(fn: StatementObserver): () => void {
    this.observers.add(fn);
    return () => this.observers.delete(fn);
  }

  async time<T>(name: string, run: () => Promise<T>): Promise<T> {
    if (this.observers.size === 0) return run();
    const started = performance.now();
    try {
      return await run();
    } finally {
      const seconds = (performance.now() - started) / 1000;
      for (const fn of this.observers) fn(name, seconds);
    }
  }
}
