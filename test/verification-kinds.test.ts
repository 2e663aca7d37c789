// Verification compares answers by their kind (issue 28; src/verify/compare.ts), end to end on
// both backends: /v1 jobs through the real app, nodes on the worker wire (inject) that declared
// the capabilities the jobs need, every temperature-0 job (and every embeddings job) copied.
// A node that answers a tools job in text, or with other arguments, is struck while honest
// nodes whose arguments only differ in key order agree; the same for JSON answers (keys
// reordered agree, other values do not) and embeddings (float noise agrees, another vector not).
import { afterEach, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import type { VerifyConfig } from '../src/config-verify.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestWorker, type Job } from './helpers/coordinator.js';
import { until } from './helpers/wait.js';
import { rng } from '../scripts/tiny-gguf.js'; // mulberry32: the same numbers every run

const MODEL = 'kinds-model';
const VERIFY: Partial<VerifyConfig> = { enabled: true, share: 1, probeInterval: 0, maxTokensPerSecond: 0 };
const CAPS = ['sampling', 'tools', 'json', 'embeddings'];
type Params = { input?: string[]; tools?: unknown[] };
type Result = Record<string, unknown>;
/** What a node answers to a job: its `result`. */
type Answer = (node: string, job: Job & { params?: Params }) => Result;

const hashOf = (s: string) => [...s].reduce((h, c) => (Math.imul(h, 31) + c.charCodeAt(0)) >>> 0, 7);
const base64 = (xs: number[]) => Buffer.from(new Float32Array(xs).buffer).toString('base64');
/** The text's "true" embedding: a seeded vector of 64 numbers. */
const embedding = (text: string, seed = 0) => {
  const r = rng(hashOf(text) + seed);
  return Array.from({ length: 64 }, () => r() * 2 - 1);
};
const message = (content: string, extra: Record<string, unknown> = {}) => ({ message: { role: 'assistant', content, ...extra } });
const prompt = (job: Job) => job.messages.at(-1)!.content;
const cityOf = (job: Job) => prompt(job).split(' ').at(-1)!;
const toolCall = (args: string) =>
  message('', { tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: args } }] });

describe.each(backends)('verification by answer kind on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  const q = async <T>(name: string, text: string, values: unknown[] = []) => t.db.query<T>(sql(name, text), values);
  const strikes = async (node: string) =>
    (
      await q<{ kind: string }>(
        't_k_strikes',
        'SELECT k.kind FROM node_strikes k JOIN nodes n ON n.id = k.node_id WHERE n.name = $1::text ORDER BY k.id',
        [node],
      )
    ).map((s) => s.kind);
  const agreements = async (node: string) =>
    (
      await q<{ n: number }>(
        't_k_agree',
        'SELECT coalesce((SELECT s.agreements FROM node_standing s WHERE s.node_id = n.id), 0)::int AS n FROM nodes n WHERE n.name = $1::text',
        [node],
      )
    )[0]!.n;
  /** Every one of `users` user jobs was submitted, and nothing is left to run or audit. */
  const settled = async (users: number) =>
    (
      await q<{ ok: boolean }>(
        't_k_open',
        `SELECT (SELECT count(*) FROM jobs WHERE kind = 'user') >= $1::int
    AND NOT EXISTS (SELECT 1 FROM jobs WHERE state IN ('queued', 'leased')) AND NOT EXISTS (SELECT 1 FROM job_audits) AS ok`,
        [users],
      )
    )[0]!.ok;

  /** Three nodes (two honest, one not) serve `jobs` requests to `url`; every job and check answered until all is settled. */
  async function run(url: string, bodies: Record<string, unknown>[], answer: Answer) {
    t = await startApp(backend, { verify: VERIFY });
    const user = await t.addUser();
    const workers: TestWorker[] = [];
    for (const name of ['honest-1', 'honest-2', 'liar']) {
      const w = await new TestWorker(t.app, name, await t.addNode(name)).start([MODEL]);
      const res = await w.post('/worker/update_models', { node_url: name, models: [MODEL], capabilities: { [MODEL]: CAPS } }, true);
      expect(res.statusCode).toBe(200);
      workers.push(w);
    }
    const calls = bodies.map((b) =>
      t.app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${user}` }, payload: { model: MODEL, ...b } }),
    );
    await until(
      'the jobs and their checks to settle',
      async () => {
        for (const w of workers) {
          const job = (await w.getJob()) as (Job & { params?: Params }) | null;
          if (job)
            expect(
              (
                await w.post('/worker/update_result', {
                  job_id: job.job_id,
                  api_key: job.api_key,
                  model_name: job.model,
                  result: answer(w.node, job),
                  status: 'success',
                })
              ).statusCode,
            ).toBe(200);
        }
        return settled(bodies.length);
      },
      40_000,
      async () =>
        `${JSON.stringify(await q('t_k_dbg', "SELECT kind, state, needs, exclude_nodes::text, node_id::int, EXISTS (SELECT 1 FROM job_audits a WHERE a.job_id = jobs.id) AS unaudited FROM jobs WHERE state IN ('queued','leased') OR id IN (SELECT job_id FROM job_audits)"))} ${JSON.stringify(await q('t_k_dbg2', 'SELECT node_id::int, state FROM node_standing'))}`,
    );
    for (const r of await Promise.all(calls)) expect(r.statusCode).toBe(200);
    // Every copy carried its original's request whole: the tools, response_format or input with it.
    const [copies] = await q<{ n: number; same: number; params: number }>(
      't_k_copies',
      `SELECT count(*)::int AS n, count(*) FILTER (WHERE c.request = o.request)::int AS same,
      count(*) FILTER (WHERE c.request -> 'params' ?| array['tools', 'response_format', 'input'])::int AS params FROM jobs c JOIN jobs o ON o.id = c.verify_of`,
    );
    expect(copies!.n).toBeGreaterThan(0);
    expect(copies).toEqual({ n: copies!.n, same: copies!.n, params: copies!.n });
    // The liar was caught at least once (every job it ran, or checked, disagreed with the others), the honest never.
    expect(await strikes('honest-1')).toEqual([]);
    expect(await strikes('honest-2')).toEqual([]);
    expect((await agreements('honest-1')) + (await agreements('honest-2'))).toBeGreaterThan(0);
    const caught = await strikes('liar');
    expect(caught.length).toBeGreaterThan(0);
    expect(new Set(caught)).toEqual(new Set(['disagreement']));
    expect(await agreements('liar')).toBe(0);
  }

  const chats = (extra: Record<string, unknown>) =>
    ['Paris', 'Oslo', 'Lima', 'Kyiv', 'Quito', 'Hanoi', 'Dakar', 'Perth', 'Riga'].map((city) => ({
      messages: [{ role: 'user', content: `What is the weather in ${city}` }],
      temperature: 0,
      ...extra,
    }));
  const TOOLS = {
    tools: [
      {
        type: 'function',
        function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string' } } } },
      },
    ],
  };

  it('tools: text instead of a call disagrees; the same call with its arguments in another key order agrees', { timeout: 120_000 }, async () => {
    await run('/v1/chat/completions', chats(TOOLS), (node, job) => {
      if (node === 'liar') return message(`The weather in ${cityOf(job)} is mild and sunny today.`);
      return toolCall(
        node === 'honest-1' ? JSON.stringify({ city: cityOf(job), unit: 'celsius' }) : `{"unit": "celsius",  "city": "${cityOf(job)}"}`,
      );
    });
  });

  it("tools: a call with other arguments disagrees (its text, empty, is the same as the others')", { timeout: 120_000 }, async () => {
    await run('/v1/chat/completions', chats(TOOLS), (node, job) =>
      toolCall(
        node === 'liar'
          ? JSON.stringify({ city: cityOf(job), unit: 'fahrenheit' })
          : node === 'honest-1'
            ? JSON.stringify({ city: cityOf(job), unit: 'celsius' })
            : `{"unit":"celsius","city":"${cityOf(job)}"}`,
      ),
    );
  });

  it('JSON answers: keys reordered agree, other values disagree', { timeout: 120_000 }, async () => {
    await run(
      '/v1/chat/completions',
      chats({ response_format: { type: 'json_object' } }).map((c) => ({
        ...c,
        messages: [{ role: 'user', content: `In JSON: ${c.messages[0]!.content}` }],
      })),
      (node, job) => {
        const city = cityOf(job);
        if (node === 'liar') return message(JSON.stringify({ city, temperature_c: 99, sky: 'clear' }));
        return message(
          node === 'honest-1'
            ? JSON.stringify({ city, temperature_c: 21.5, sky: 'clear' })
            : `{ "sky": "clear", "temperature_c": 21.500000001, "city": "${city}" }`,
        );
      },
    );
  });

  it('embeddings: tiny noise agrees, another vector disagrees (whatever the temperature: embeddings are always checkable)', {
    timeout: 120_000,
  }, async () => {
    const noise = rng(31);
    await run(
      '/v1/embeddings',
      ['alpha', 'beta gamma', 'delta', 'epsilon zeta', 'eta', 'theta iota', 'kappa', 'lambda mu', 'nu'].map((text) => ({
        input: [text, `${text} again`],
      })),
      (node, job) => {
        const input = job.params!.input!;
        const vectors = input.map((text) =>
          node === 'liar' ? embedding(text, 1) : embedding(text).map((x) => (node === 'honest-2' ? x + (noise() - 0.5) * 0.002 : x)),
        );
        return { ...message(''), embeddings: vectors.map(base64) };
      },
    );
  });
});
