// A small network for front-door tests: the real app listening, and for each backend kind a test
// backend (test/helpers/backends.ts) serving one model with a real `ins worker` (in process) in
// front of it — node `<kind>-node`, model `<kind>-<suffix>`.
import type { Backend } from './db.js';
import { startApp } from './app.js';
import { startFakeBackend, type FakeBackend, type FakeKind } from './backends.js';
import { startWorker, type InProcessWorker } from './worker.js';

export interface TestNetwork<K extends FakeKind> {
  t: Awaited<ReturnType<typeof startApp>>;
  url: string;
  fakes: Record<K, FakeBackend>;
  workers: InProcessWorker[];
  close(): Promise<void>;
}

/** `setUp` adjusts each test backend before its worker starts (and asks the backend what it serves). */
export async function startNetwork<K extends FakeKind>(
  db: Backend,
  kinds: readonly K[],
  suffix = 'model',
  setUp?: (fake: FakeBackend) => void,
): Promise<TestNetwork<K>> {
  const t = await startApp(db, { coordinator: { sweepInterval: 0.2 } });
  const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
  const fakes = {} as Record<K, FakeBackend>;
  const workers: InProcessWorker[] = [];
  for (const kind of kinds) {
    fakes[kind] = await startFakeBackend(kind, [`${kind}-${suffix}`]);
    setUp?.(fakes[kind]);
    workers.push(
      await startWorker({ server: url, node: `${kind}-node`, key: await t.addNode(`${kind}-node`), backend: kind, backendUrl: fakes[kind].url }),
    );
  }
  return {
    t,
    url,
    fakes,
    workers,
    async close() {
      for (const w of workers) await w.stop();
      for (const f of Object.values<FakeBackend>(fakes)) await f.close();
      await t.close();
    },
  };
}

/**
 * Ollama-faced nodes made one at a time on a listening app, each with its own test backend, for
 * tests that fail one node and let another take over: `backendFor(model)`, then `workerOn(it)`
 * (node `node-N`; `continueAnswers: false` makes a node that answers afresh). `close()` stops them.
 */
export function nodeMaker(t: { addNode(name: string): Promise<string> }, url: () => string) {
  const fakes: FakeBackend[] = [];
  const workers: InProcessWorker[] = [];
  let n = 0;
  return {
    async backendFor(model: string): Promise<FakeBackend> {
      const b = await startFakeBackend('ollama', [model]);
      fakes.push(b);
      return b;
    },
    async workerOn(b: FakeBackend, continueAnswers = true): Promise<InProcessWorker> {
      const node = `node-${++n}`;
      const w = await startWorker({ server: url(), node, key: await t.addNode(node), backend: 'ollama', backendUrl: b.url, continueAnswers });
      workers.push(w);
      return w;
    },
    /** The next node's name, for a worker the test starts itself (as a process). */
    nextNode: () => `node-${++n}`,
    async close(): Promise<void> {
      for (const w of workers) await w.stop();
      for (const b of fakes) await b.close();
    },
  };
}
