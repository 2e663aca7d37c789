// The operator's view of the coordinator through `ins`, while the server runs (commands are
// forwarded over the admin socket): user keys with their kind, nodes online with their models
// and leases, jobs listed, shown with their leases, and canceled.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CLEAN_EXIT, runCli, startServerProcess, stopped } from './helpers/process.js';

const dir = mkdtempSync(path.join(tmpdir(), 'ins-cli-coord-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const env = { DATA_DIR: path.join(dir, 'data') };
const ins = (...args: string[]) => runCli(args, env);

describe('ins and the coordinator', () => {
  it('issues user keys, lists nodes online with models and leases, and lists, shows and cancels jobs', async () => {
    const nodeKey = (await ins('node', 'add', 'gpu-a')).stdout.trim();
    const user = await ins('key', 'add-user', 'my-app');
    expect(user.code).toBe(0);
    const userKey = user.stdout.trim();
    expect(userKey).toMatch(/^uk_[A-Za-z0-9_-]{43}$/);
    expect((await ins('key', 'add-reader', 'grafana')).code).toBe(0);
    const server = await startServerProcess(env);
    try {
      const call = async (p: string, init: RequestInit = {}) => {
        const res = await fetch(`${server.url}${p}`, { ...init, headers: { 'content-type': 'application/json', ...init.headers } });
        return { status: res.status, body: (await res.json()) as Record<string, unknown> };
      };
      const reg = await call('/worker/register_node', {
        method: 'POST',
        headers: { authorization: `Bearer ${nodeKey}` },
        body: JSON.stringify({ node_url: 'gpu-a', node_version: '1', stats: {} }),
      });
      const auth = { authorization: `Bearer ${String(reg.body.access_token)}` };
      await call('/worker/update_models', { method: 'POST', headers: auth, body: JSON.stringify({ node_url: 'gpu-a', models: ['m-1', 'm-2'] }) });
      const submit = async (model: string) =>
        String(
          (
            await call('/submit_job', {
              method: 'POST',
              headers: { api_key: userKey },
              body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
            })
          ).body.job_id,
        );
      const leasedId = await submit('m-1');
      const queuedId = await submit('m-3');
      const job = (await call('/worker/get_job', { headers: auth })).body.job_data as { job_id: string };
      expect(job.job_id).toBe(leasedId);

      const keys = JSON.parse((await ins('key', 'list', '--json')).stdout) as { kind: string; label: string }[];
      expect(keys.map((k) => [k.kind, k.label])).toEqual([
        ['user', 'my-app'],
        ['reader', 'grafana'],
      ]);
      const nodes = JSON.parse((await ins('node', 'list', '--json')).stdout) as Record<string, unknown>[];
      expect(nodes).toEqual([
        expect.objectContaining({
          name: 'gpu-a',
          online: true,
          models: ['m-1', 'm-2'],
          open_leases: 1,
          last_seen_at: expect.any(String),
          standing: 'trusted',
        }),
      ]);
      expect((await ins('node', 'list')).stdout).toMatch(/gpu-a\s+active\s+trusted\s+online\s+\S+\s+m-1,m-2\s+1/);

      const jobs = JSON.parse((await ins('job', 'list', '--json')).stdout) as { id: string; state: string }[];
      expect(jobs.map((j) => [j.id, j.state]).sort()).toEqual(
        [
          [leasedId, 'leased'],
          [queuedId, 'queued'],
        ].sort(),
      );
      expect(JSON.parse((await ins('job', 'list', '--state', 'queued', '--json')).stdout)).toEqual([
        expect.objectContaining({ id: queuedId, kind: 'user', model: 'm-3', owner: 'my-app' }),
      ]);
      const shown = JSON.parse((await ins('job', 'show', leasedId, '--json')).stdout) as { leases: { node: string; outcome: string | null }[] };
      expect(shown.leases).toEqual([expect.objectContaining({ attempt: 1, node: 'gpu-a', outcome: null })]);
      expect((await ins('job', 'show', leasedId)).stdout).toMatch(/leases:\n\s+ATTEMPT\s+NODE/);

      // A queued or a leased job can be canceled; its owner then reads it as canceled, and the
      // node working on the leased one is refused (400, nothing credited) when it reports.
      const leasedCancel = await ins('job', 'cancel', leasedId);
      expect(leasedCancel.code).toBe(0);
      expect(leasedCancel.stdout).toMatch(/canceled \(it was leased\)/);
      const late = await call('/worker/update_result', {
        method: 'POST',
        body: JSON.stringify({
          job_id: leasedId,
          api_key: (job as unknown as { api_key: string }).api_key,
          model_name: 'm-1',
          result: { message: 'x' },
          status: 'success',
        }),
      });
      expect(late.status).toBe(400);
      expect(String(late.body.detail)).toMatch(/canceled/);
      const cancel = await ins('job', 'cancel', queuedId);
      expect(cancel.code).toBe(0);
      // Again: already canceled is what was asked for (exit 0), as POST /cancel_job answers 200.
      const again = await ins('job', 'cancel', queuedId);
      expect(again.code).toBe(0);
      expect(again.stdout).toMatch(/was already canceled/);
      expect((await call(`/get_result/${queuedId}`, { headers: { api_key: userKey } })).body).toMatchObject({
        status: 'canceled',
        result: { message: { content: '' } },
      });
      expect(JSON.parse((await ins('job', 'show', leasedId, '--json')).stdout)).toMatchObject({
        state: 'canceled',
        leases: [expect.objectContaining({ outcome: 'canceled' })],
      });
      // Counted by the server the command ran in (ins_jobs_finished_total).
      expect(await (await fetch(`${server.url}/metrics`)).text()).toMatch(/ins_jobs_finished_total\{state="canceled"\} 2/);
      for (const bad of [
        ['job', 'show', 'nope'],
        ['job', 'list', '--state', 'lost'],
        ['job', 'list', '--limit', '0'],
        ['node', 'list', '--state', 'queued'],
      ]) {
        expect((await ins(...bad)).code, bad.join(' ')).toBe(2);
      }
      // A revoked user key stops working at once.
      expect((await ins('key', 'revoke', 'my-app')).code).toBe(0);
      expect(
        (
          await call('/submit_job', {
            method: 'POST',
            headers: { api_key: userKey },
            body: JSON.stringify({ model: 'm-1', messages: [{ role: 'user', content: 'x' }] }),
          })
        ).status,
      ).toBe(401);
    } finally {
      expect(await stopped(server), server.logs()).toEqual(CLEAN_EXIT);
    }
    // Sixteen `ins` processes and a server's start and stop: 34 s on an idle slow machine, 50 s
    // beside two busy cores, past the suite's 60 s once with more beside them. A guard, not a
    // latency check.
  }, 180_000);
});
