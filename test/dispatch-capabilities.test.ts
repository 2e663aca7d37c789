// A job that needs a capability (tools, here) reaches the waiting node able to run it at once,
// though a node unable to is woken for it first (it waited longer): the round that could not take
// it hands it on to the waiting polls of other capabilities (src/jobs/dispatcher.ts handOn). The
// dispatcher's once-a-second recheck, which used to find it, is off here, so the test fails
// without the hand-on: the able node's poll would end empty. Both backends, the real app (inject).
import { afterEach, describe, expect, it } from 'vitest';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { TestUser, TestWorker } from './helpers/coordinator.js';

const MODEL = 'tools-model';

describe.each(backends)('dispatch by capability on $name', (backend) => {
  let t: Awaited<ReturnType<typeof startApp>>;
  afterEach(async () => t?.close());

  it('hands a job a waiting node cannot run on to a waiting node that can, without the recheck', async () => {
    t = await startApp(backend, { dispatch: { recheck: false } });
    const user = new TestUser(t.app, await t.addUser());
    const plain = await new TestWorker(t.app, 'plain', await t.addNode('plain')).start([MODEL]);
    const able = await new TestWorker(t.app, 'able', await t.addNode('able')).start([MODEL]);
    expect(
      (await able.post('/worker/update_models', { node_url: 'able', models: [MODEL], capabilities: { [MODEL]: ['tools'] } }, true)).statusCode,
    ).toBe(200);
    const waiting = () => t.app.service.coordinator.waitingWorkers;

    // The node without tools waits first, so the submission offers the job to it first.
    const plainPoll = plain.getJobRaw(30);
    await expect.poll(waiting).toBe(1);
    const ablePoll = able.getJob(30);
    await expect.poll(waiting).toBe(2);
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

    const job = await ablePoll;
    expect(job?.messages.at(-1)?.content).toBe('weather?');
    expect((await able.report(job!, 'It is sunny.')).statusCode).toBe(200);
    expect((await call).statusCode).toBe(200);
    // The node without tools got nothing; its deregistration ends its poll.
    expect(waiting()).toBe(1);
    expect((await plain.deregister()).statusCode).toBe(200);
    expect((await plainPoll).json()).toEqual({ job_data: null });
  });
});
