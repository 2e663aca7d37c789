// A server that closes serves what still arrives on an open connection — a worker's report on
// the keep-alive connection its long poll just came back on, or nginx's upstream keep-alive
// reusing one — with `Connection: close`, rather than refusing it 503: the seed's worker stops for
// hours on a 5xx to its report (src/app.ts closeUnusedConnectionsOnClose).
import { Client } from 'undici';
import { describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { report, startApp } from './helpers/app.js';
import { TestWorker } from './helpers/coordinator.js';

describe('a server that closes', () => {
  it('serves a report sent on the connection its long poll came back on while it closes, with Connection: close', async () => {
    // Linger long enough for any machine's pause between the poll's answer and the report.
    const t = await startApp(backends[0]!, { closingLingerMs: 60_000 });
    let closed: Promise<void> | undefined;
    const client = new Client(await t.app.listen({ port: 0, host: '127.0.0.1' }), { pipelining: 1 });
    try {
      const key = await t.addNode('closing-rig');
      const auth = { authorization: `Bearer ${(await new TestWorker(t.app, 'closing-rig', key).start(['m'])).token}` };
      // One connection: the long poll, then the report on it.
      const poll = client.request({ method: 'GET', path: '/worker/get_job?node_version=x&wait=30', headers: auth });
      await expect.poll(async () => (await t.app.inject({ url: '/metrics' })).body).toMatch(/^ins_workers_waiting 1$/m);
      closed = t.close();
      const polled = await poll;
      expect(polled.statusCode).toBe(200);
      expect(await polled.body.json()).toEqual({ job_data: null });
      const reported = await client.request({
        method: 'POST',
        path: '/worker/update_result',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(report(key)),
      });
      expect(reported.statusCode).toBe(200);
      expect(reported.headers.connection).toBe('close');
      expect(await reported.body.json()).toMatchObject({ status: 'success', points: 1, replayed: false });
    } finally {
      await client.close().catch(() => undefined);
      await (closed ?? t.close());
    }
  });

  it('ends a connection answered while it closes once it lingered unused, not at its keep-alive timeout: the close completes', async () => {
    // Keep-alive of ten minutes: only the linger can end the connection the client keeps.
    const t = await startApp(backends[0]!, { keepAliveTimeoutMs: 600_000, closingLingerMs: 50 });
    const client = new Client(await t.app.listen({ port: 0, host: '127.0.0.1' }), { pipelining: 1, keepAliveTimeout: 600_000 });
    try {
      const auth = { authorization: `Bearer ${(await new TestWorker(t.app, 'lingering-rig', await t.addNode('lingering-rig')).start(['m'])).token}` };
      const poll = client.request({ method: 'GET', path: '/worker/get_job?node_version=x&wait=30', headers: auth });
      await expect.poll(async () => (await t.app.inject({ url: '/metrics' })).body).toMatch(/^ins_workers_waiting 1$/m);
      const closed = t.close();
      const polled = await poll;
      expect(await polled.body.json()).toEqual({ job_data: null });
      // The client keeps its connection; the server ends it, and its close completes (else the test times out).
      await closed;
    } finally {
      await client.close().catch(() => undefined);
    }
  });
});
