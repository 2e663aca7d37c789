// The real app with `ins worker` nodes in this process, one model each, for the token-level
// audits of test/token-audit-*.test.ts: each test starts its app and nodes, and they are closed
// after it. With the queries and waits of tokenAudits (test/helpers/audits.ts) on that app.
import { afterEach } from 'vitest';
import type { VerifyConfig } from '../../src/config-verify.js';
import type { BackendKind, WorkerOptions } from '../../src/worker/options.js';
import { backends, type Backend } from './db.js';
import { startApp } from './app.js';
import { TestUser } from './coordinator.js';
import { startWorker, until, type InProcessWorker } from './worker.js';
import { tokenAudits } from './audits.js';

/** A node: its name, and the model it serves (a seed, and the noise on that seed's weights). */
export interface TokenNode {
  name: string;
  seed: number;
  noise?: number;
}

/** Three honest nodes: the model (seed 1), and twice with 1 % noise on its weights (machines never agree bit for bit). */
export const HONEST_NODES: readonly TokenNode[] = [
  { name: 'honest-1', seed: 1 },
  { name: 'honest-2', seed: 1, noise: 0.01 },
  { name: 'honest-3', seed: 1, noise: 0.01 },
];
/** Two of the honest nodes and an impostor: another model (seed 2) of the same vocabulary. */
export const WITH_IMPOSTOR: readonly TokenNode[] = [...HONEST_NODES.slice(0, 2), { name: 'impostor', seed: 2 }];

/**
 * Every job checked (a floor at the full rate: fixed checking, src/verify/check-rate.ts), no
 * probes, no throughput limit. Replay detection off: a random tiny model gives one greedy answer
 * to many prompts (a real model does not), which verify/answers.ts rightly finds suspicious; it
 * is not what these tests are about.
 */
export const EVERY_JOB_CHECKED = {
  enabled: true,
  share: 1,
  floor: 1,
  probeInterval: 0,
  maxTokensPerSecond: 0,
  minWordsForReplay: 1_000_000,
} satisfies Partial<VerifyConfig>;

/**
 * Called in a describe. `serve` gives a node's worker its backend (the server, node name, key
 * and models are this helper's); `prompt` makes each job's prompt; `db` is the embedded
 * database unless given.
 */
export function tokenNodes(o: {
  model: string;
  prompt: () => string;
  serve: (
    n: TokenNode,
  ) =>
    | ({ backend: BackendKind; backendUrl: string } & Partial<WorkerOptions>)
    | Promise<{ backend: BackendKind; backendUrl: string } & Partial<WorkerOptions>>;
  verify?: Partial<VerifyConfig>;
  db?: Backend;
}) {
  let t: Awaited<ReturnType<typeof startApp>> | undefined;
  let url = '';
  const workers: InProcessWorker[] = [];
  afterEach(async () => {
    await stopNodes();
    await t?.close();
    t = undefined;
  });
  /** This test's app, as startApp (test/helpers/app.ts) gave it. */
  const app = () => {
    if (!t) throw new Error('no app: start() first');
    return t;
  };

  /** Starts one more node against the running app. */
  const node = async (n: TokenNode) => {
    const w = await startWorker({ server: url, node: n.name, key: await app().addNode(n.name), models: [o.model], ...(await o.serve(n)) });
    workers.push(w);
    return w;
  };
  /** Stops every node started so far; the app runs on. */
  const stopNodes = async () => {
    for (const w of workers.splice(0)) await w.stop();
  };
  /** The app (its verification `verify` over the describe's) and `nodes`; answers a user of it. */
  const start = async (nodes: readonly TokenNode[], verify: Partial<VerifyConfig> = {}) => {
    t = await startApp(o.db ?? backends.find((b) => b.name === 'pglite')!, { verify: { ...(o.verify ?? EVERY_JOB_CHECKED), ...verify } });
    url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    for (const n of nodes) await node(n);
    return new TestUser(t.app, await t.addUser());
  };
  const audits = tokenAudits(() => app().db);
  /** `n` jobs of the model, each with at most 32 tokens out, temperature 0 unless `params` says otherwise for the i-th. */
  const submit = async (user: TestUser, n: number, params: (i: number) => Record<string, unknown> = () => ({ temperature: 0 })) => {
    for (let i = 0; i < n; i++) await user.submit(o.model, o.prompt(), { max_output: 32, ...params(i) });
  };
  const settle = (ms: number) => until('the jobs and their checks to settle', audits.settled, ms);
  /**
   * `n` jobs in batches of 100 that settle in turn: all at once, the last jobs of a long run
   * would wait past their deadline (JOB_TIMEOUT) behind the others, and an expired job is not
   * scored. `ms` is each batch's wait.
   */
  const submitInBatches = async (user: TestUser, n: number, ms: number, params?: (i: number) => Record<string, unknown>) => {
    for (let done = 0; done < n; done += 100) {
      await submit(user, Math.min(100, n - done), params);
      await settle(ms);
    }
  };
  return { app, start, node, stopNodes, submit, settle, submitInBatches, ...audits };
}
