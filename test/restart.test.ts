// Durability: every result acknowledged with 200 is present after the server is killed with
// SIGKILL in the middle of a load and started again, on both backends; none credited twice.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createPostgresDatabase, TEST_DATABASE_URL } from './helpers/db.js';
import { CLEAN_EXIT, runCli, startServerProcess, stopped } from './helpers/process.js';

interface Target {
  name: string;
  env: () => Promise<Record<string, string>>;
  cleanup: () => Promise<void>;
}

const dirs: string[] = [];
const drops: (() => Promise<void>)[] = [];
const targets: Target[] = [
  {
    name: 'embedded PGlite',
    env: async () => {
      const dir = mkdtempSync(path.join(tmpdir(), 'ins-restart-'));
      dirs.push(dir);
      return { DATA_DIR: dir };
    },
    cleanup: async () => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })),
  },
  ...(TEST_DATABASE_URL
    ? [
        {
          name: 'PostgreSQL',
          env: async () => {
            const { url, drop } = await createPostgresDatabase();
            drops.push(drop);
            // As an operator does: only `ins migrate` and `ins serve` migrate a PostgreSQL database.
            expect((await runCli(['migrate'], { DATABASE_URL: url })).code).toBe(0);
            return { DATABASE_URL: url };
          },
          cleanup: async () => {
            for (const d of drops) await d();
          },
        },
      ]
    : []),
];

describe.each(targets)('SIGKILL and restart on $name', (target) => {
  afterAll(async () => target.cleanup());

  it('keeps every acknowledged result, credited exactly once', async () => {
    const env = await target.env();
    const added = await runCli(['node', 'add', 'survivor'], env);
    expect(added.code).toBe(0);
    const key = added.stdout.trim();

    const server = await startServerProcess(env);
    const acked: string[] = [];
    let stop = false;
    // Eight concurrent reporters until the kill.
    const reporters = Array.from({ length: 8 }, async (_, w) => {
      for (let i = 0; !stop; i++) {
        const job_id = `w${w}-${i}`;
        try {
          const res = await fetch(`${server.url}/worker/update_result`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ job_id, api_key: key, model_name: 'durable', result: { message: 'ok' }, status: 'success' }),
          });
          if (res.status === 200) acked.push(job_id);
        } catch {
          return; // connection dropped by the kill
        }
      }
    });
    // Killed mid-load: once a good number of reports were acknowledged, whatever the machine's pace.
    await expect.poll(() => acked.length, { timeout: 60_000, interval: 20 }).toBeGreaterThan(20);
    server.child.kill('SIGKILL');
    stop = true;
    await Promise.all(reporters);
    await server.exited;
    expect(acked.length).toBeGreaterThan(20);
    if (process.env.INS_TEST_VERBOSE) console.log(`${target.name}: ${acked.length} acknowledged before SIGKILL`);

    const again = await startServerProcess(env);
    try {
      const res = await fetch(`${again.url}/daily_points`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', api_key: key },
        body: JSON.stringify({ node_name: 'survivor', last_days: 2 }),
      });
      const days = (await res.json()) as { points: number }[];
      const credited = days.reduce((s, d) => s + d.points, 0);
      // Every acknowledged job is there and was credited once; a report in flight at the kill
      // may also have been committed without its 200 reaching us.
      if (process.env.INS_TEST_VERBOSE) console.log(`${target.name}: ${credited} credited after restart`);
      expect(credited).toBeGreaterThanOrEqual(acked.length);
      expect(credited).toBeLessThanOrEqual(acked.length + 8);
      // Re-sending every acknowledged report is a replay: nothing is credited twice.
      for (const job_id of acked.slice(0, 50)) {
        const r = await fetch(`${again.url}/worker/update_result`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ job_id, api_key: key, model_name: 'durable', result: { message: 'ok' }, status: 'success' }),
        });
        expect(await r.json()).toMatchObject({ replayed: true, points: 0 });
      }
    } finally {
      expect(await stopped(again), again.logs()).toEqual(CLEAN_EXIT);
    }
  });
});
