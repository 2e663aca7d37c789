// Nodes declare what they run (issue 31): update_models' optional `builds` (digest and
// quantisation per model), stored per session and model, shown on /network per model and to the
// node's operator on /network/nodes/{name}, and used to place verification's copies — on both
// backends, through the real app, nodes on the worker wire (inject). The seed's worker, which sends no builds, works as before.
import { afterEach, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { copiesCounted } from './helpers/audits.js';
import { until } from './helpers/wait.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';

const MODEL = 'builds-model';

describe.each(backends)('model builds on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  const q = async <T>(name: string, text: string, values: unknown[] = []) => t.db.query<T>(sql(name, text), values);
  const builds = async () =>
    q<{ node: string; model: string; digest: string | null; quantization: string | null }>(
      't_b_rows',
      `SELECT n.name AS node, m.name AS model, b.digest, b.quantization
    FROM session_model_builds b JOIN node_sessions s ON s.id = b.session_id JOIN nodes n ON n.id = s.node_id JOIN models m ON m.id = b.model_id ORDER BY n.name, m.name`,
    );
  const declare = (w: TestWorker, models: string[], extra: Record<string, unknown>) =>
    w.post('/worker/update_models', { node_url: w.node, models, ...extra }, true);
  const quantizations = async (model: string) =>
    (
      (await t.app.inject({ method: 'GET', url: '/network', headers: { api_key: await t.addReader() } })).json() as {
        models: { name: string; quantizations: unknown }[];
      }
    ).models.find((m) => m.name === model)?.quantizations;
  /** GET /network/nodes/{name} as the node itself reads it: its `builds`. */
  const nodeBuilds = async (w: TestWorker) => {
    const res = await t.app.inject({ method: 'GET', url: `/network/nodes/${w.node}`, headers: { authorization: `Bearer ${w.token}` } });
    expect(res.statusCode).toBe(200);
    return (res.json() as { builds: unknown }).builds;
  };
  const worker = async (name: string, models = [MODEL]) => new TestWorker(t.app, name, await t.addNode(name)).start(models);

  it('round trip: stored per session and model, replaced by the next declaration, shown on /network; bad builds are 422 and change nothing', {
    timeout: 120_000,
  }, async () => {
    t = await startApp(backend);
    const a = await worker('node-a', [MODEL, 'other']);
    const b = await worker('node-b');
    const seed = await worker('seed');
    expect(
      (
        await declare(a, [MODEL, 'other'], {
          builds: {
            [MODEL]: { digest: 'sha256:aa11', quantization: 'Q4_K_M' },
            other: { digest: 'sha256:bb22' },
            undeclared: { quantization: 'Q2_K' },
          },
        })
      ).statusCode,
    ).toBe(200);
    expect((await declare(b, [MODEL], { builds: { [MODEL]: { quantization: 'Q8_0' } } })).statusCode).toBe(200);
    expect(await builds()).toEqual([
      { node: 'node-a', model: 'builds-model', digest: 'sha256:aa11', quantization: 'Q4_K_M' },
      { node: 'node-a', model: 'other', digest: 'sha256:bb22', quantization: null },
      { node: 'node-b', model: 'builds-model', digest: null, quantization: 'Q8_0' },
    ]);
    // Three nodes serve it (the seed's worker too); two declared a quantisation.
    expect(await quantizations(MODEL)).toEqual([
      { quantization: 'Q4_K_M', nodes: 1 },
      { quantization: 'Q8_0', nodes: 1 },
    ]);
    expect(await quantizations('other')).toEqual([]);
    const network = (await t.app.inject({ method: 'GET', url: '/network', headers: { api_key: await t.addReader() } })).json() as {
      models: { name: string; nodes: number }[];
    };
    expect(network.models.find((m) => m.name === MODEL)!.nodes).toBe(3);
    // Each node's operator sees what their node declared it runs (a model not declared by it: absent).
    expect(await nodeBuilds(a)).toEqual([
      { model: 'builds-model', digest: 'sha256:aa11', quantization: 'Q4_K_M' },
      { model: 'other', digest: 'sha256:bb22' },
    ]);
    expect(await nodeBuilds(b)).toEqual([{ model: 'builds-model', quantization: 'Q8_0' }]);
    expect(await nodeBuilds(seed)).toEqual([]);

    for (const bad of [
      [],
      'Q4',
      { [MODEL]: 'Q4' },
      { [MODEL]: { quantization: 4 } },
      { [MODEL]: { quantization: 'has space' } },
      { [MODEL]: { digest: 'x'.repeat(129) } },
    ]) {
      const res = await declare(a, [MODEL], { builds: bad });
      expect(res.statusCode, JSON.stringify(bad)).toBe(422);
      expect(res.body).toContain('builds');
    }
    // Malformed capabilities likewise: FastAPI's 422 list, naming the field (not an empty body).
    for (const bad of [{ [MODEL]: 'tools' }, { [MODEL]: Array.from({ length: 17 }, () => 'tools') }, { [MODEL]: ['x'.repeat(33)] }]) {
      const res = await declare(a, [MODEL], { capabilities: bad });
      expect(res.statusCode, JSON.stringify(bad)).toBe(422);
      expect(res.json()).toEqual({
        detail: [expect.objectContaining({ loc: ['body', 'capabilities', MODEL], msg: expect.stringContaining('capabilities') })],
      });
    }
    expect((await builds()).filter((r) => r.node === 'node-a')).toHaveLength(2);

    // The next declaration replaces the last: one model's build changed, the other's gone.
    expect((await declare(a, [MODEL, 'other'], { builds: { [MODEL]: { digest: 'sha256:cc33', quantization: 'Q8_0' } } })).statusCode).toBe(200);
    expect((await builds()).filter((r) => r.node === 'node-a')).toEqual([
      { node: 'node-a', model: 'builds-model', digest: 'sha256:cc33', quantization: 'Q8_0' },
    ]);
    expect(await nodeBuilds(a)).toEqual([{ model: 'builds-model', digest: 'sha256:cc33', quantization: 'Q8_0' }]);
    expect(await quantizations(MODEL)).toEqual([{ quantization: 'Q8_0', nodes: 2 }]);
    // Without builds at all (the seed's wire): nothing declared.
    expect((await declare(a, [MODEL], {})).statusCode).toBe(200);
    expect((await builds()).filter((r) => r.node === 'node-a')).toEqual([]);

    // The seed's worker, which never sends builds, gets and reports jobs as before.
    const user = new TestUser(t.app, await t.addUser());
    const id = await user.submit(MODEL, 'hello');
    const job = await seed.getJob();
    expect(job?.job_id).toBe(id);
    expect((await seed.report(job!, 'hi')).statusCode).toBe(200);
    // A node gone offline no longer counts.
    expect((await b.deregister()).statusCode).toBe(200);
    expect(await quantizations(MODEL)).toEqual([]);
  });

  it("a score check goes to a scorer of the judged node's quantisation when one is online, else to any scorer", { timeout: 120_000 }, async () => {
    t = await startApp(backend, { verify: { enabled: true, share: 1, probeInterval: 0, maxTokensPerSecond: 0 } });
    const user = new TestUser(t.app, await t.addUser());
    const checkOf = async (original: string) => {
      await until(
        'the score check',
        async () => (await q('t_s_check', 'SELECT 1 FROM jobs WHERE verify_of = $1::uuid', [original])).length > 0,
        20_000,
      );
      return (
        await q<{ exclude: number[]; score: boolean }>(
          't_s_excl',
          "SELECT exclude_nodes::int[] AS exclude, request -> 'params' -> 'score' IS NOT NULL AS score FROM jobs WHERE verify_of = $1::uuid",
          [original],
        )
      )[0]!;
    };
    const judged = await worker('judged');
    const other = await worker('other-quant');
    const same = await worker('same-quant');
    for (const [w, quantization] of [
      [judged, 'Q4_K_M'],
      [other, 'Q8_0'],
      [same, 'Q4_K_M'],
    ] as const) {
      expect((await declare(w, [MODEL], { builds: { [MODEL]: { quantization } }, capabilities: { [MODEL]: ['score'] } })).statusCode).toBe(200);
    }
    const [judgedId, otherId] = (
      await q<{ id: number }>('t_s_ids', "SELECT id::int FROM nodes WHERE name IN ('judged', 'other-quant') ORDER BY id")
    ).map((r) => r.id);

    const first = await user.submit(MODEL, 'first question', { temperature: 0 });
    const job = await judged.getJob();
    expect(job?.job_id).toBe(first);
    expect((await judged.report(job!, 'an answer of several words')).statusCode).toBe(200);
    // A score check, kept off the scorer of another quantisation.
    expect(await checkOf(first)).toEqual({ exclude: [judgedId, otherId], score: true });

    // No scorer of its quantisation online: any scorer checks it.
    expect((await same.deregister()).statusCode).toBe(200);
    const second = await user.submit(MODEL, 'second question', { temperature: 0 });
    await until(
      'the second job',
      async () => {
        const j = await judged.getJob();
        if (j?.job_id === second) expect((await judged.report(j, 'another answer of several words')).statusCode).toBe(200);
        return j?.job_id === second;
      },
      20_000,
    );
    expect(await checkOf(second)).toEqual({ exclude: [judgedId], score: true });
  });

  it("a copy goes to a node of the judged node's quantisation when one is online, else to any; never where the job's capabilities are missing", {
    timeout: 120_000,
  }, async () => {
    t = await startApp(backend, { verify: { enabled: true, share: 1, probeInterval: 0, maxTokensPerSecond: 0 } });
    const user = new TestUser(t.app, await t.addUser());
    const ids = async (...names: string[]) =>
      (await q<{ id: number }>('t_b_ids', 'SELECT id::int FROM nodes WHERE name = ANY($1::text[]) ORDER BY id', [names])).map((r) => r.id);
    // A poll that looks once finds the copy once the server has counted it (helpers/audits.ts).
    const copyOf = async (original: string, nth: number) => {
      await until(
        'the copy',
        async () =>
          (await q('t_b_copy', 'SELECT 1 FROM jobs WHERE verify_of = $1::uuid', [original])).length > 0 && (await copiesCounted(t.app)) >= nth,
        20_000,
      );
      return (
        await q<{ exclude: number[] }>('t_b_excl', 'SELECT exclude_nodes::int[] AS exclude FROM jobs WHERE verify_of = $1::uuid', [original])
      )[0]!.exclude;
    };
    const judged = await worker('judged');
    const other = await worker('other-quant');
    const same = await worker('same-quant');
    await declare(judged, [MODEL], { builds: { [MODEL]: { quantization: 'Q4_K_M' } } });
    await declare(other, [MODEL], { builds: { [MODEL]: { quantization: 'Q8_0' } } });
    await declare(same, [MODEL], { builds: { [MODEL]: { quantization: 'Q4_K_M' } } });
    const [judgedId, otherId] = await ids('judged', 'other-quant');

    const first = await user.submit(MODEL, 'first question', { temperature: 0 });
    const job = await judged.getJob();
    expect(job?.job_id).toBe(first);
    expect((await judged.report(job!, 'an answer')).statusCode).toBe(200);
    // The node of another quantisation is kept off the copy; the node of the same gets it.
    expect(await copyOf(first, 1)).toEqual([judgedId, otherId]);
    expect((await other.getJob())?.messages).toBeUndefined();
    const copy1 = await same.getJob();
    expect(copy1?.messages.at(-1)?.content).toBe('first question');
    expect((await same.report(copy1!, 'an answer')).statusCode).toBe(200);

    // No node of its quantisation online: any other node checks it.
    expect((await same.deregister()).statusCode).toBe(200);
    const second = await user.submit(MODEL, 'second question', { temperature: 0 });
    const job2 = await judged.getJob();
    expect(job2?.job_id).toBe(second);
    expect((await judged.report(job2!, 'another answer')).statusCode).toBe(200);
    expect(await copyOf(second, 2)).toEqual([judgedId]);
    const copy2 = await other.getJob();
    expect(copy2?.messages.at(-1)?.content).toBe('second question');
    expect((await other.report(copy2!, 'another answer')).statusCode).toBe(200);

    // A tools job nobody else who declared `tools` could check: no copy is made (it would only wait out its deadline).
    await declare(judged, [MODEL], { capabilities: { [MODEL]: ['tools'] } });
    const call = t.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${user.key}` },
      payload: {
        model: MODEL,
        temperature: 0,
        messages: [{ role: 'user', content: 'weather?' }],
        tools: [{ type: 'function', function: { name: 'get_weather' } }],
      },
    });
    let tools: Awaited<ReturnType<TestWorker['getJob']>> = null;
    await until('the tools job', async () => (tools = await judged.getJob()) !== null, 20_000);
    expect((await other.getJob())?.messages).toBeUndefined();
    expect((await judged.report(tools!, 'It is sunny.')).statusCode).toBe(200);
    expect((await call).statusCode).toBe(200);
    await until(
      'its audit',
      async () =>
        (await q('t_b_audits', 'SELECT 1 FROM job_audits')).length === 0 &&
        (await q('t_b_done', "SELECT 1 FROM jobs WHERE id = $1::uuid AND state = 'done'", [tools!.job_id])).length > 0,
      20_000,
    );
    expect(await q('t_b_nocopy', 'SELECT 1 FROM jobs WHERE verify_of = $1::uuid', [tools!.job_id])).toEqual([]);
  });
});
