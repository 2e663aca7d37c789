// The in-memory rosters answer unique_nodes exactly even when other servers write: a new node
// for a model bumps the version (reload), and later successes of known nodes — which leave the
// cached last success behind — are decided by the database.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type Database } from '../src/db/database.js';
import { createNode } from '../src/repositories/nodes.js';
import { RosterCache } from '../src/repositories/model-roster.js';
import { recordResult } from '../src/repositories/results.js';
import { backends } from './helpers/db.js';

const BRUTE = `SELECT n.name FROM job_results r JOIN nodes n ON n.id = r.node_id JOIN models m ON m.id = r.model_id
  WHERE m.name = $1 AND r.status = 'success' AND r.received_at BETWEEN $2::timestamptz AND $3::timestamptz GROUP BY n.name ORDER BY n.name COLLATE "C"`;

describe.each(backends)('model rosters on $name', (backend) => {
  let db: Database;
  const ids: Record<string, number> = {};
  let job = 0;
  const report = (node: string, model = 'roster-model') =>
    recordResult(db, { nodeId: ids[node]!, jobId: `r-${job++}`, modelName: model, status: 'success', result: {}, defaultPoints: 1 });
  const brute = async (model: string, s: string | null, e: string | null) =>
    (await db.query<{ name: string }>(sql('t_brute_roster', BRUTE), [model, s ?? '-infinity', e ?? 'infinity'])).map((r) => r.name);
  const now = async () => (await db.query<{ t: string }>(sql('t_now', `SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS t`)))[0]!.t;
  const tick = () => new Promise((r) => setTimeout(r, 15));

  beforeAll(async () => {
    db = await backend.open();
    for (const n of ['n-a', 'n-b', 'n-c']) ids[n] = (await createNode(db, n)).id;
  });
  afterAll(async () => db.close());

  it('stays exact while two servers read and the history grows', async () => {
    // A long maxAge: only the version and the database keep the answers right.
    const serverA = new RosterCache(3_600_000);
    const serverB = new RosterCache(3_600_000);
    await report('n-a');
    await tick();
    const t1 = await now();
    expect(await serverA.uniqueNodes(db, 'roster-model', null, null)).toEqual(['n-a']);
    expect(await serverB.uniqueNodes(db, 'roster-model', null, null)).toEqual(['n-a']);

    // A node new to the model: both servers see it at once.
    await tick();
    await report('n-b');
    expect(await serverA.uniqueNodes(db, 'roster-model', null, null)).toEqual(['n-a', 'n-b']);
    expect(await serverB.uniqueNodes(db, 'roster-model', t1, null)).toEqual(['n-b']);

    // A known node reports again: no version change, the cached last success is stale.
    await tick();
    const t2 = await now();
    await tick();
    await report('n-a');
    await tick();
    const t3 = await now();
    for (const cache of [serverA, serverB]) {
      expect(await cache.uniqueNodes(db, 'roster-model', t2, null)).toEqual(['n-a']);
      expect(await cache.uniqueNodes(db, 'roster-model', t2, t3)).toEqual(['n-a']);
      expect(await cache.uniqueNodes(db, 'roster-model', t1, t2)).toEqual(['n-b']);
      expect(await cache.uniqueNodes(db, 'roster-model', null, t1)).toEqual(['n-a']);
    }
    for (const [s, e] of [[null, null], [t1, null], [t2, t3], [t1, t2], [null, t1], [t3, null]] as const) {
      expect(await serverA.uniqueNodes(db, 'roster-model', s, e)).toEqual(await brute('roster-model', s, e));
    }
  });

  it('answers an unknown model with no nodes', async () => {
    expect(await new RosterCache().uniqueNodes(db, 'never-reported', null, null)).toEqual([]);
  });
});
