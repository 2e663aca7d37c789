// The node lifecycle (src/nodes/lifecycle.ts): every transition's outcome reaches every
// consumer, on the server whose statement made it and on another server (two apps on one
// database: the in-process events, deduplicated against the NOTIFY on ins_keys; a strike,
// announced without a server id, through the NOTIFY alone). Table-driven over the transitions,
// modelled on test/lifecycle.test.ts: each row acts through the wire or the lifecycle the CLI
// uses, and the consumers are checked by what they do — the key and session cache (a key or
// token cached on both servers is refused, or accepted, at once on both), the dispatcher (a
// waiting poll of the node answers at once; a suspended node gets no lease), the job lifecycle
// (a lease held goes back to the queue), the metrics (counted where the statement ran) — and a
// recording consumer sees the outcome itself on both servers.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { startApp, type TestApp } from './helpers/app.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';
import { buildApp } from '../src/app.js';
import { sql } from '../src/db/database.js';
import type { NodeOutcome } from '../src/nodes/outcome.js';
import { agreeNodes, strikeNode } from '../src/nodes/sql/standing.js';
import { runCommand } from '../src/cli/commands.js';
import { Recorder } from './helpers/recorder.js';

const MODEL = 'node-life-model';

describe.each(backends)('node lifecycle on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let other: TestApp;
  const here = new Recorder<NodeOutcome>();
  const there = new Recorder<NodeOutcome>();
  let user: TestUser;

  beforeAll(async () => {
    t = await startApp(backend);
    other = await buildApp({ db: t.db, verify: { enabled: false }, coordinator: { sweepInterval: 3600 } });
    t.app.service.nodes.use(here);
    other.service.nodes.use(there);
    user = new TestUser(t.app, await t.addUser());
  }, 180_000); // two servers on one embedded database: minutes on a loaded machine
  afterAll(async () => {
    await other?.close();
    await t?.close();
  }, 180_000);

  let statements = 0;
  const q = <R>(text: string, values: unknown[] = []) => t.db.query<R>(sql(`t_nq_${++statements}`, text), values);
  const mark = () => ({ here: here.seen.length, there: there.seen.length });
  /** The outcome seen on both servers: here as `local` says, there as another server's. */
  const both = async (from: { here: number; there: number }, match: (o: NodeOutcome) => boolean, local = true) => {
    const a = await here.next((s) => s.local === local && match(s.outcome), from.here);
    const b = await there.next((s) => !s.local && match(s.outcome), from.there);
    return [a.outcome, b.outcome];
  };
  const is =
    (change: string, nodeId: number, sessionId: number | null = null) =>
    (o: NodeOutcome) =>
      o.change === change && o.nodeId === nodeId && (sessionId === null || o.sessionId === sessionId);
  const metric = async (app: TestApp, change: string) =>
    Number(new RegExp(`ins_node_transitions_total\\{change="${change}"\\} (\\d+)`).exec(await app.metrics.registry.metrics())?.[1] ?? 0);
  /** A node-key read (get_points), on each server: 200 own, 403 disabled, 401 unknown key. */
  const keyStatus = async (name: string, key: string) =>
    Promise.all(
      [t.app, other].map(
        async (app) => (await app.inject({ method: 'GET', url: `/get_points?node_name=${name}`, headers: { api_key: key } })).statusCode,
      ),
    );
  /** A session token's status on each server (get_job looks once). */
  const tokenStatus = async (token: string) =>
    Promise.all(
      [t.app, other].map(
        async (app) =>
          (await app.inject({ method: 'GET', url: '/worker/get_job?node_version=0.1.0', headers: { authorization: `Bearer ${token}` } })).statusCode,
      ),
    );
  const nodeId = async (name: string) => (await q<{ id: number }>('SELECT id FROM nodes WHERE name = $1', [name]))[0]!.id;
  let nodes = 0;
  /** A node with a worker started (registered, its models declared) and its key and token cached on both servers. */
  const started = async () => {
    const name = `nl-${++nodes}`;
    const { key } = await t.app.service.nodes.add(name);
    const w = await new TestWorker(t.app, name, key).start([MODEL]);
    expect(await keyStatus(name, key)).toEqual([200, 200]);
    expect(await tokenStatus(w.token)).toEqual([200, 200]);
    return { name, key, w, id: await nodeId(name) };
  };
  /** A job leased to the worker: its lease goes back when the node's access ends. */
  const leased = async (w: TestWorker) => {
    const id = await user.submit(MODEL, 'held');
    expect((await w.getJob())?.job_id).toBe(id);
    return id;
  };
  const stateOf = async (id: string) => (await q<{ state: string }>('SELECT state FROM jobs WHERE id = $1', [id]))[0]!.state;
  const cancel = (id: string) => q("UPDATE jobs SET state = 'canceled' WHERE id = $1", [id]);

  const rows: { name: string; run: () => Promise<void> }[] = [
    {
      name: 'add: announced on both servers, the key works on both, counted here',
      run: async () => {
        const m = mark();
        const before = await metric(t.app, 'added');
        const { id, key } = await t.app.service.nodes.add('nl-added');
        await both(m, is('added', id));
        expect(await keyStatus('nl-added', key)).toEqual([200, 200]);
        expect(await metric(t.app, 'added')).toBe(before + 1);
        expect(await metric(other, 'added')).toBe(0);
      },
    },
    {
      name: 'register (the wire): announced with its session; the token works on both servers',
      run: async () => {
        const m = mark();
        const { w, id } = await started();
        const [a] = await both(m, is('registered', id));
        expect(a!.sessionId).toBeGreaterThan(0);
        expect(await tokenStatus(w.token)).toEqual([200, 200]);
      },
    },
    {
      name: 'declare (the wire): the session cached on the other server serves its new models at once',
      run: async () => {
        const { w, id } = await started();
        const m = mark();
        expect((await w.post('/worker/update_models', { node_url: w.node, models: [MODEL, 'nl-second'] }, true)).statusCode).toBe(200);
        await both(m, is('declared', id));
        const job = await user.submit('nl-second', 'new model');
        const there = new TestWorker(other, w.node, '');
        there.token = w.token;
        expect((await there.getJob())?.job_id).toBe(job);
        await cancel(job);
      },
    },
    {
      name: 'disable: the key is refused at once on both servers, the lease held goes back, a waiting poll answers',
      run: async () => {
        const { name, key, w, id } = await started();
        const job = await leased(w);
        // A second session of the node waits on the other server.
        const waiting = (await new TestWorker(other, name, key).start([MODEL])).getJobRaw(30);
        await expect.poll(() => other.service.coordinator.waitingWorkers).toBe(1);
        const m = mark();
        expect(await t.app.service.nodes.disable(name)).toBe(id);
        expect(await keyStatus(name, key)).toEqual([403, 403]);
        expect(await tokenStatus(w.token)).toEqual([401, 401]);
        // Queued again; a round of the other server's dispatcher in flight may lease it to the
        // ended poll, whose lease is undone at once (dispatcher.ts deliver()).
        await expect.poll(() => stateOf(job)).toBe('queued');
        await both(m, is('disabled', id));
        expect((await waiting).json()).toMatchObject({ job_data: null });
        expect(other.service.coordinator.waitingWorkers).toBe(0);
        await cancel(job);
      },
    },
    {
      name: 'enable: the key works again on both servers, the sessions the disable ended stay ended',
      run: async () => {
        const { name, key, w, id } = await started();
        await t.app.service.nodes.disable(name);
        expect(await keyStatus(name, key)).toEqual([403, 403]);
        const m = mark();
        expect(await t.app.service.nodes.enable(name)).toBe(id);
        expect(await keyStatus(name, key)).toEqual([200, 200]);
        expect(await tokenStatus(w.token)).toEqual([401, 401]);
        await both(m, is('enabled', id));
      },
    },
    {
      name: 'rotate key: the old key and its session fail on both servers, the new key works, the lease goes back',
      run: async () => {
        const { name, key, w, id } = await started();
        const job = await leased(w);
        const m = mark();
        const rotated = (await t.app.service.nodes.rotate(name))!;
        expect(await keyStatus(name, key)).toEqual([401, 401]);
        expect(await tokenStatus(w.token)).toEqual([401, 401]);
        expect(await keyStatus(name, rotated.key)).toEqual([200, 200]);
        expect(await stateOf(job)).toBe('queued');
        await both(m, is('rotated', id));
        await cancel(job);
      },
    },
    {
      name: 'deregister (the wire): the token fails on both servers, the lease goes back, the node key still works',
      run: async () => {
        const { name, key, w, id } = await started();
        const job = await leased(w);
        const m = mark();
        expect((await w.deregister()).statusCode).toBe(200);
        expect(await tokenStatus(w.token)).toEqual([401, 401]);
        expect(await stateOf(job)).toBe('queued');
        expect(await keyStatus(name, key)).toEqual([200, 200]);
        // Offline now, and `ins node list` still says when it was last seen.
        const out: string[] = [];
        expect(await runCommand(t.db, ['node', 'list', '--json'], { out: (l) => out.push(l), err: () => {} })).toBe(0);
        expect((JSON.parse(out.join('')) as { name: string }[]).find((n) => n.name === name)).toMatchObject({
          online: false,
          last_seen_at: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/),
        });
        await both(m, is('deregistered', id));
        await cancel(job);
      },
    },
    {
      name: "strike (suspend): through the NOTIFY alone, both servers refuse the node's models and lease it nothing",
      run: async () => {
        const { name, w, id } = await started();
        const job = await user.submit(MODEL, 'not for a suspended node');
        const servers = async () => {
          const listed =
            ((await t.app.inject({ method: 'GET', url: '/available_models' })).json() as { details: { name: string; nodes: number }[] }).details.find(
              (d) => d.name === MODEL,
            )?.nodes ?? 0;
          const network =
            (
              (await t.app.inject({ method: 'GET', url: '/network', headers: { api_key: await t.addReader() } })).json() as {
                models: { name: string; nodes: number }[];
              }
            ).models.find((d) => d.name === MODEL)?.nodes ?? 0;
          expect(network).toBe(listed);
          return listed;
        };
        const serving = await servers();
        expect(serving).toBeGreaterThanOrEqual(1);
        const m = mark();
        // The verifier strikes inside its transaction and applies the suspension once committed.
        const { after, outcome } = await t.db.transaction((tx) => strikeNode(tx, id, job, 'give_up', { job_id: job }, 3600, 1));
        expect(after).toBe('suspended');
        t.app.service.nodes.apply(outcome);
        await both(m, is('suspended', id));
        // The announcement without a server id reaches the other server by NOTIFY as well.
        await there.next((s) => !s.local && is('suspended', id)(s.outcome), m.there);
        expect(await tokenStatus(w.token)).toEqual([200, 200]);
        for (const app of [t.app, other]) {
          const upd = await app.inject({
            method: 'POST',
            url: '/worker/update_models',
            payload: { node_url: w.node, models: [MODEL] },
            headers: { authorization: `Bearer ${w.token}` },
          });
          expect(upd.statusCode).toBe(403);
          const poll = await app.inject({
            method: 'GET',
            url: '/worker/get_job?node_version=0.1.0',
            headers: { authorization: `Bearer ${w.token}` },
          });
          expect(poll.json()).toMatchObject({ job_data: null });
        }
        expect(await stateOf(job)).toBe('queued');
        // It serves nothing: its model is not listed for it (a request only it could run is then
        // refused at once, not left to wait), and `ins node list` shows no models for it.
        expect(await servers()).toBe(serving - 1);
        const out: string[] = [];
        expect(await runCommand(t.db, ['node', 'list', '--json'], { out: (l) => out.push(l), err: () => {} })).toBe(0);
        expect((JSON.parse(out.join('')) as { name: string; models: string[]; standing: string }[]).find((n) => n.name === name)).toMatchObject({
          models: [],
          standing: 'suspended',
        });
        await cancel(job);
      },
    },
    {
      name: 'agree (a probation ended by agreements, verification): announced as the strike is, applied once committed, counted here',
      run: async () => {
        const { id } = await started();
        const job = await user.submit(MODEL, 'a job the strike names');
        await t.db.transaction((tx) => strikeNode(tx, id, job, 'give_up', { job_id: job }, 3600, 3, t.app.service.nodes.server));
        // One agreement short of the two that end it: still on probation, nothing announced.
        expect(await t.db.transaction((tx) => agreeNodes(tx, [id], 2, t.app.service.nodes.server))).toEqual([]);
        const counted = await metric(t.app, 'cleared');
        // Two agreements in one batch (a node once per agreement), and a node never judged: only the probation ended is announced.
        const unjudged = (await started()).id;
        const m = mark();
        const outcomes = await t.db.transaction((tx) => agreeNodes(tx, [id, unjudged, id], 2, t.app.service.nodes.server));
        expect(outcomes).toEqual([{ change: 'cleared', nodeId: id, sessionId: null }]);
        for (const o of outcomes) t.app.service.nodes.apply(o);
        await both(m, is('cleared', id));
        expect(await metric(t.app, 'cleared')).toBe(counted + 1);
        expect((await q<{ state: string }>('SELECT state FROM node_standing WHERE node_id = $1', [id]))[0]!.state).toBe('trusted');
        await cancel(job);
      },
    },
    {
      name: 'restore (ins node reinstate, inside the server): the node serves again; both servers hear it',
      run: async () => {
        const { name, w, id } = await started();
        const job = await user.submit(MODEL, 'for the restored node');
        await t.db.transaction((tx) => strikeNode(tx, id, job, 'give_up', { job_id: job }, 3600, 1));
        t.app.service.nodes.apply({ change: 'suspended', nodeId: id, sessionId: null });
        expect((await w.post('/worker/update_models', { node_url: w.node, models: [MODEL] }, true)).statusCode).toBe(403);
        const m = mark();
        const out: string[] = [];
        const io = { out: (s: string) => out.push(s), err: (s: string) => out.push(s) };
        expect(await runCommand(t.db, ['node', 'reinstate', name], io, { jobs: t.app.service.coordinator.lifecycle })).toBe(0);
        // The CLI's lifecycle is another server's to both apps.
        await both(m, is('restored', id), false);
        expect((await w.post('/worker/update_models', { node_url: w.node, models: [MODEL] }, true)).statusCode).toBe(200);
        expect((await w.getJob())?.job_id).toBe(job);
        await cancel(job);
      },
    },
    {
      name: 'disable (ins node disable, inside the server): refused at once on both servers, the lease goes back',
      run: async () => {
        const { name, key, w, id } = await started();
        const job = await leased(w);
        const m = mark();
        const io = { out: () => {}, err: () => {} };
        expect(await runCommand(t.db, ['node', 'disable', name], io, { jobs: t.app.service.coordinator.lifecycle })).toBe(0);
        expect(await keyStatus(name, key)).toEqual([403, 403]);
        expect(await stateOf(job)).toBe('queued');
        await both(m, is('disabled', id), false);
        await cancel(job);
      },
    },
  ];

  it.each(rows)('$name', async ({ run }) => {
    await run();
  });

  // Another server's statement disabled the node or gave it a new key, and its announcement has
  // not arrived: the change is written straight to the database. The poll already waiting here
  // is neither handed the job (jobs_submit) nor leased it (jobs_lease): the session no longer holds.
  it.each([
    ['disabled', 'disabled_at = now()'],
    ['given a new key', "key_hash = repeat('0', 64)"],
  ])('gives a waiting poll no job once its node was %s, before any announcement', async (_, change) => {
    const { w, id } = await started();
    const waiting = t.app.service.coordinator.waitingWorkers;
    const poll = w.getJobRaw(2);
    await expect.poll(() => t.app.service.coordinator.waitingWorkers).toBe(waiting + 1);
    await q(`UPDATE nodes SET ${change} WHERE id = $1`, [id]);
    const job = await user.submit(MODEL, 'not for this node any more');
    expect((await poll).json()).toMatchObject({ job_data: null });
    expect(await stateOf(job)).toBe('queued');
    // Its next poll (its token still cached here) finds the job queued: the lease round passes it by.
    const next = await w.getJobRaw(1);
    expect(next.statusCode === 200 ? next.json() : null).not.toMatchObject({ job_data: { job_id: job } });
    expect(await stateOf(job)).toBe('queued');
    await cancel(job);
  });
});
