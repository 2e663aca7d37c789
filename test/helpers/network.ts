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

export async function startNetwork<K extends FakeKind>(db: Backend, kinds: readonly K[], suffix = 'model'): Promise<TestNetwork<K>> {
  const t = await startApp(db, { coordinator: { sweepInterval: 0.2 } });
  const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
  const fakes = {} as Record<K, FakeBackend>;
  const workers: InProcessWorker[] = [];
  for (const kind of kinds) {
    fakes[kind] = await startFakeBackend(kind, [`${kind}-${suffix}`]);
    workers.push(await startWorker({ server: url, node: `${kind}-node`, key: await t.addNode(`${kind}-node`), backend: kind, backendUrl: fakes[kind].url }));
  }
  return {
    t, url, fakes, workers,
    async close() {
      for (const w of workers) await w.stop();
      for (const f of Object.values<FakeBackend>(fakes)) await f.close();
      await t.close();
    },
  };
}
