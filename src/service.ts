// The service's domain, composed: one per app (src/app.ts builds HTTP on top of it), nothing
// shared between two in one process but what they are given. The job coordinator (and its
// lifecycle), verification — a consumer of the lifecycle's outcomes that queues its checks
// through it —, the points ledger (its key, its reads, the closer of days), the key cache, the
// caches of the record-keeping reads, the result recorder. Whoever observes the service (the
// metrics, the log) is given at start: outcome consumers, verification's and the ledger's events.
import type { Database } from './db/database.js';
import type { CoordinatorConfig } from './config.js';
import type { VerifyConfig } from './config-verify.js';
import { Coordinator } from './jobs/coordinator.js';
import type { LiveConsumer } from './jobs/lifecycle.js';
import { Verifier, type VerifierEvents } from './verify/verifier.js';
import { PrincipalCache } from './auth/authenticate.js';
import { RosterCache } from './repositories/model-roster.js';
import { PointsLoader } from './repositories/points.js';
import { ResultRecorder } from './results/recorder.js';
import { LedgerKeyError, LedgerKeys } from './ledger/keys.js';
import { LedgerReader } from './ledger/read.js';
import { DayCloser, type DayCloserEvents } from './ledger/closer.js';
import { Retention, type RetentionEvents, type RetentionOptions } from './retention/retention.js';
import { Settler } from './usage/settle.js';
import { NodeLifecycle } from './nodes/lifecycle.js';
import type { NodeConsumer } from './nodes/outcome.js';

export interface ServiceOptions {
  coordinator: CoordinatorConfig;
  verify: VerifyConfig;
  defaultPointsPerJob: number;
  /** Measurement switches of the dispatcher (docs/coordinator.md, Dispatch): all on unless a benchmark (or a test) turns one off. */
  dispatch?: { handOff?: boolean; trackEmpty?: boolean; recheck?: boolean };
  /** The points ledger (docs/ledger.md). */
  ledger?: LedgerOptions;
  /** Retention of finished jobs (src/retention/); absent: off (the server passes JOB_RETENTION). */
  retention?: RetentionOptions;
  /**
   * Seconds between the settler's looks (src/usage/settle.ts): about how long a finished job's
   * tokens take to come back to its owner's quota (the server: 1). Unset: no automatic looks
   * (tests settle with service.usage.settle()).
   */
  settleEvery?: number;
}

export interface LedgerOptions {
  /** LEDGER_KEY_FILE; else the key lives in the database. */
  keyFile?: string;
  /** Seconds between looks for days to close (and one at start); unset: no automatic closing (tests close with app.ledger.closer). */
  closeEvery?: number;
  /** Seconds after a day's end before it closes; default the evidence window (VERIFY_EVIDENCE_WINDOW). */
  window?: number;
}

export interface ServiceObservers {
  /** Consumers of every job outcome (the metrics), besides the service's own. */
  outcomes: LiveConsumer[];
  /** Consumers of every node outcome (the metrics), besides the service's own (nodes/lifecycle.ts). */
  nodeOutcomes?: NodeConsumer[];
  /** What verification finds, and its failures. */
  verification: Omit<VerifierEvents, 'error'>;
  /** What the closer of days does (ledger/closer.ts). */
  ledger: DayCloserEvents & { cannotSign: (keyId: string) => void };
  /** What retention deletes, and its failures (retention/retention.ts). */
  retention: RetentionEvents;
  /** A background task failed (logged and counted by the observer; the service carries on). */
  error: (err: unknown, where: 'coordinator' | 'verification' | 'usage') => void;
  /** The ledger's signing key could not be read at start (the database is away): it is read when needed. */
  warn: (err: unknown, what: string) => void;
}

export class Service {
  private constructor(
    readonly db: Database,
    readonly options: ServiceOptions,
    readonly coordinator: Coordinator,
    /** The node lifecycle: every change of a node, and its consumers here (nodes/lifecycle.ts). */
    readonly nodes: NodeLifecycle,
    readonly verifier: Verifier,
    readonly principals: PrincipalCache,
    readonly rosters: RosterCache,
    readonly points: PointsLoader,
    readonly results: ResultRecorder,
    readonly ledger: { keys: LedgerKeys; reader: LedgerReader; closer: DayCloser },
    readonly retention: Retention,
    readonly usage: Settler,
    private readonly stopNodes: () => Promise<void>,
  ) {}

  static async start(db: Database, options: ServiceOptions, observers: ServiceObservers): Promise<Service> {
    const principals = new PrincipalCache();
    const c = options.coordinator;
    const coordinator = await Coordinator.start(db, {
      ...c,
      defaultPointsPerJob: options.defaultPointsPerJob,
      checkPrice: options.verify.checkPrice,
      audit: options.verify.enabled,
      onError: (err) => observers.error(err, 'coordinator'),
      ...options.dispatch,
    });
    const lifecycle = coordinator.lifecycle;
    // Node changes reach the key and session cache, the dispatcher and the metrics; ending a
    // node's access hands its leases back through the job lifecycle.
    const nodes = new NodeLifecycle(db, lifecycle, (err) => observers.error(err, 'coordinator'));
    for (const consumer of [principals, coordinator.nodes, ...(observers.nodeOutcomes ?? [])]) nodes.use(consumer);
    const stopNodes = await nodes.listen();
    const verifier = new Verifier(db, {
      verify: options.verify,
      onlineWindow: c.onlineWindow,
      modelsTtl: c.modelsTtl,
      jobTimeout: c.jobTimeout,
      jobs: {
        queueChecks: (tx, checks, deadline) => lifecycle.queueChecks(tx, checks, deadline),
        apply: (o) => lifecycle.apply(o),
        delivered: (ids) => coordinator.delivered(ids),
      },
      events: { ...observers.verification, error: (err) => observers.error(err, 'verification') },
      nodes,
    });
    coordinator.use(verifier);
    // A request-error claim's audit copy commits with the claim (issue 53; verify/request-errors.ts).
    if (options.verify.enabled) lifecycle.auditClaimsWith((tx, claims) => verifier.auditClaims(tx, claims));
    for (const consumer of observers.outcomes) coordinator.use(consumer);
    // The points ledger: days close by themselves on every server that can sign (one at a time).
    const window = options.ledger?.window ?? options.verify.evidenceWindow;
    const keys = new LedgerKeys(db, options.ledger?.keyFile);
    // A key file that is not the ledger's stops the start; a database away now is tried again later.
    await keys.get().catch((err: unknown) => {
      if (err instanceof LedgerKeyError) throw err;
      observers.warn(err, 'ledger: could not read the signing key yet; trying again when it is needed');
    });
    const closer = new DayCloser(db, keys, { window, server: coordinator.server }, observers.ledger);
    if (options.ledger?.closeEvery) closer.start(options.ledger.closeEvery);
    const ledger = { keys, reader: new LedgerReader(db, window), closer };
    // Retention: one server at a time prunes what is past JOB_RETENTION and the ledger's closing.
    const retention = new Retention(db, options.retention ?? { window: 0 }, observers.retention);
    if (options.retention?.every) retention.start(options.retention.every);
    // Token usage: one server at a time folds finished jobs' usage into their owners' counters.
    const usage = new Settler(db, { error: (err) => observers.error(err, 'usage') });
    if (options.settleEvery) usage.start(options.settleEvery);
    return new Service(
      db,
      options,
      coordinator,
      nodes,
      verifier,
      principals,
      new RosterCache(db),
      new PointsLoader(db),
      new ResultRecorder(db),
      ledger,
      retention,
      usage,
      stopNodes,
    );
  }

  /** Waiting polls answer at once (the server is stopping). */
  drain(): void {
    this.coordinator.drain();
  }

  async close(): Promise<void> {
    await this.retention.close();
    await this.usage.close();
    await this.ledger.closer.close();
    await this.verifier.close();
    await this.coordinator.close();
    await this.stopNodes();
  }
}
