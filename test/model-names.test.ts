// Issue 29 (low): submit_job with any model name created a models row (and usage and
// fair-queue rows per model), so one key could grow those tables without bound. A key may now
// bring at most NEW_MODELS_PER_KEY_PER_DAY new names into being per UTC day; beyond, a
// submission of a further new name is a 429 with Retry-After and creates nothing, while names
// that exist — declared by a node, or named before by anyone — are never refused.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';
import { sql } from '../src/db/database.js';
import { NEW_MODELS_PER_KEY_PER_DAY } from '../src/jobs/submit.js';

describe.each(backends)('new model names per key on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  beforeAll(async () => {
    t = await startApp(backend);
  });
  afterAll(async () => {
    await t.close();
  });
  const models = async () => (await t.db.query<{ n: number }>(sql('t_models_n', 'SELECT count(*)::int AS n FROM models')))[0]!.n;
  const submit = (key: string, model: string) =>
    t.app.inject({
      method: 'POST',
      url: '/submit_job',
      headers: { api_key: key },
      payload: { model, messages: [{ role: 'user', content: 'hi' }], max_output: 1, temperature: 0 },
    });

  it("refuses a key its new names beyond the day's bound, and nothing else", async () => {
    const key = await t.addUser('naming');
    // A node declares one model before: a name that exists.
    await new TestWorker(t.app, 'decl', await t.addNode('decl')).start(['declared-model']);
    for (let i = 0; i < NEW_MODELS_PER_KEY_PER_DAY; i++) expect((await submit(key, `new-${i}`)).statusCode).toBe(200);
    const before = await models();
    const refused = await submit(key, 'one-too-many');
    expect(refused.statusCode).toBe(429);
    expect(refused.json().detail).toMatch(/^Too many new models: this key named 100 new models today/);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    expect(await models()).toBe(before);
    // Names that exist are taken: its own from today, and the declared one.
    expect((await submit(key, 'new-0')).statusCode).toBe(200);
    expect((await submit(key, 'declared-model')).statusCode).toBe(200);
    // Another key has its own bound; the name it creates is then open to the first key too.
    const other = new TestUser(t.app, await t.addUser('other'));
    await other.submit('one-too-many');
    expect((await submit(key, 'one-too-many')).statusCode).toBe(200);
    expect(await models()).toBe(before + 1);
  });
});
