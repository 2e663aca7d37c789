// Request-error claims are audited (issue 29; docs/verification.md, "Request errors"): a node
// whose backend answers 400 to everything fails each job it gets at once (400, no retry), so
// each such claim is copied to another node, and when that node answers it the claimer gets a
// `false_request_error` strike — when the claimer's declared context held the request (issue 53:
// its vLLM lists max_model_len); a node that declared no context is not audited at all (it may
// have refused honestly: test/declared-context.test.ts has the attack this closes). Real app,
// in-process workers on stub backends, both databases.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { startFakeBackend, type FakeBackend } from './helpers/backends.js';
import { startWorker, until, type InProcessWorker } from './helpers/worker.js';
import { TestUser } from './helpers/coordinator.js';

describe.each(backends)('request-error audits on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  let user: TestUser;
  const fakes: FakeBackend[] = [];
  const workers: InProcessWorker[] = [];

  beforeAll(async () => {
    // Verification on, with no probes and no random copies: the only copies are the claims' audits.
    t = await startApp(backend, { coordinator: { sweepInterval: 0.2 }, verify: { enabled: true, probeInterval: 0, share: 0 } });
    const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
    user = new TestUser(t.app, await t.addUser());
    const node = async (name: string, model: string, contextLimit: number | undefined, maxModelLen?: number) => {
      const fake = await startFakeBackend('vllm', [model]);
      fake.contextLimit = contextLimit;
      fake.maxModelLen = maxModelLen;
      fakes.push(fake);
      workers.push(await startWorker({ server: url, node: name, key: await t.addNode(name), backend: 'vllm', backendUrl: fake.url }));
    };
    // A backend that refuses every prompt (more than 0 words) as too long, beside an honest one.
    // Its vLLM lists an 8,192-token max_model_len, which the worker declares: that covers every prompt here.
    await node('claimer', 'claim-model', 0, 8192);
    await node('answerer', 'claim-model', undefined, 8192);
    // Two honest backends with a small context that list no max_model_len (they declare none): a long prompt is refused by both.
    await node('small-1', 'small-model', 3);
    await node('small-2', 'small-model', 3);
  });
  afterAll(async () => {
    for (const w of workers) await w.stop();
    for (const f of fakes) await f.close();
    await t.close();
  });

  const q = <R>(name: string, text: string, values: unknown[] = []) => t.db.query<R>(sql(name, text), values);
  const strikes = async (node: string) =>
    await q<{ kind: string; evidence: Record<string, unknown> }>(
      `t_strikes_${node}`,
      'SELECT s.kind, s.evidence FROM node_strikes s JOIN nodes n ON n.id = s.node_id WHERE n.name = $1 ORDER BY s.id',
      [node],
    );
  /** Submits a job and waits for its end: its get_result body. */
  const run = async (model: string, content: string) => {
    const id = await user.submit(model, content);
    let body: { status: string; detail?: string } = { status: 'queued' };
    await until(`job ${id} to end`, async () => ['success', 'failed'].includes((body = (await user.result(id)).json()).status), 20_000);
    return { id, ...body };
  };
  const copyOf = async (id: string) =>
    (
      await q<{ state: string; node: string | null; exclude: string[] }>(
        't_copy',
        `SELECT c.state, n.name AS node, ARRAY(SELECT x.name FROM nodes x WHERE x.id = ANY(c.exclude_nodes)) AS exclude
     FROM jobs c LEFT JOIN nodes n ON n.id = c.node_id WHERE c.verify_of = $1::uuid`,
        [id],
      )
    )[0];

  it("a node that claims request errors for jobs another node answers gets a false_request_error strike; the user's job stays failed", async () => {
    // Jobs go to whichever node polls first: submit until one lands on the claimer.
    let claimed: { id: string; status: string; detail?: string } | undefined;
    for (let i = 0; i < 30 && !claimed; i++) {
      const r = await run('claim-model', `question number ${i}`);
      if (r.status === 'failed') claimed = r;
      else expect(r.status).toBe('success');
    }
    expect(claimed, 'a job landed on the claimer').toBeDefined();
    expect(claimed!.detail).toMatch(/^The request is longer than the context of the node that took it/);
    // The claim is copied to the other node, which answers it: the claimer is struck.
    await until("the claim's copy to be answered", async () => (await copyOf(claimed!.id))?.state === 'done');
    expect(await copyOf(claimed!.id)).toEqual({ state: 'done', node: 'answerer', exclude: ['claimer'] });
    await expect.poll(async () => (await strikes('claimer')).map((s) => s.kind), { timeout: 10_000 }).toContain('false_request_error');
    const [strike] = await strikes('claimer');
    expect(strike!.evidence).toMatchObject({ job: claimed!.id, claimed: 'invalid_request_error' });
    expect(await strikes('answerer')).toEqual([]);
    // The user's job stays failed (its 400 was answered).
    expect((await user.result(claimed!.id)).json()).toMatchObject({ status: 'failed' });
  });

  it('a request error of a node that declared no context is not audited: no copy, no strike (it may be honest)', async () => {
    const r = await run('small-model', 'one two three four five six seven');
    expect(r).toMatchObject({ status: 'failed', detail: expect.stringMatching(/^The request is longer than the context of the node that took it/) });
    const [lease] = await q<{ node: string; outcome: string }>(
      't_lease',
      'SELECT n.name AS node, l.outcome FROM job_leases l JOIN nodes n ON n.id = l.node_id WHERE l.job_id = $1::uuid',
      [r.id],
    );
    expect(lease!.outcome).toBe('request_error');
    // Before issue 53, the claim was copied to the other node (which refused it too). A claim its
    // node's declaration did not cover is not audited: a copy could only strike an honest node.
    expect(await copyOf(r.id)).toBeUndefined();
    expect(await strikes('small-1')).toEqual([]);
    expect(await strikes('small-2')).toEqual([]);
    expect((await user.result(r.id)).json()).toMatchObject({ status: 'failed' });
  });
});
