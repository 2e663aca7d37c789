// The lease statement's pairing of queued jobs (and copies) with waiting polls
// (src/jobs/sql/lease.ts): a job excluded for the node whose poll its place in line would give
// it to goes to another poll of the same round that may have it. Two copies, each excluded for
// the other one's node, were left waiting round after round until their deadline before.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { sql, type Database } from '../src/db/database.js';
import { leaseJobs, type Ask } from '../src/jobs/sql/lease.js';
import { createNode } from '../src/nodes/lifecycle.js';
import { backends } from './helpers/db.js';

describe.each(backends)('lease pairing ($name)', (backend) => {
  let db: Database;
  beforeEach(async () => {
    db = await backend.open();
  });
  afterEach(async () => {
    await db.close();
  });

  const q = <T>(name: string, text: string, values: unknown[] = []) => db.query<T>(sql(name, text), values);
  const setup = async () => {
    const nodes: { id: number; session: number }[] = [];
    for (const name of ['a', 'b']) {
      await createNode(db, name);
      const [row] = await q<{ id: number; session: number }>(
        't_session',
        `WITH n AS (SELECT id, key_hash FROM nodes WHERE name = $1::text)
        INSERT INTO node_sessions (node_id, token_hash, node_key_hash) SELECT n.id, md5(random()::text) || md5(random()::text), n.key_hash FROM n
        RETURNING node_id::int AS id, id::int AS session`,
        [name],
      );
      nodes.push(row!);
    }
    const [model] = await q<{ id: number }>('t_model', "INSERT INTO models (name) VALUES ('m') RETURNING id");
    return { nodes, model: model!.id };
  };
  // Jobs queued in this order, each excluded for the given nodes; copies point at a finished original.
  const queue = async (model: number, excludes: number[][], copies: boolean) => {
    const original = randomUUID();
    if (copies)
      await q(
        't_original',
        `INSERT INTO jobs (id, model_id, state, request, deadline_at) VALUES ($1::uuid, $2::int, 'done', '{}', now() + interval '1 minute')`,
        [original, model],
      );
    const ids: string[] = [];
    for (const [i, ex] of excludes.entries()) {
      const id = randomUUID();
      await q(
        't_job',
        `INSERT INTO jobs (id, model_id, state, request, deadline_at, submitted_at, fair_key, verify_of, exclude_nodes, kind)
        VALUES ($1::uuid, $2::int, 'queued', '{"messages": []}', now() + interval '1 minute', now() - make_interval(secs => 10 - $3::int), $3::int, $4::uuid, $5::bigint[], $6::text)`,
        [id, model, i, copies ? original : null, `{${ex.join(',')}}`, copies ? 'verify' : 'user'],
      );
      ids.push(id);
    }
    return ids;
  };
  const asks = (nodes: { id: number; session: number }[]): Ask[] =>
    nodes.map((n, i) => ({
      group: 1,
      slot: i + 1,
      sessionId: n.session,
      nodeId: n.id,
      keyHash: randomUUID().replaceAll('-', '').padEnd(64, '0'),
      rank: 1,
    }));

  for (const copies of [true, false]) {
    it(`${copies ? 'copies' : 'jobs'} each excluded for the poll in line for them go to the other poll, in one round`, async () => {
      const { nodes, model } = await setup();
      const [a, b] = nodes as [{ id: number; session: number }, { id: number; session: number }];
      // First in line goes to a's poll, second to b's: each is excluded for exactly that node.
      const [first, second] = await queue(model, [[a.id], [b.id]], copies);
      const round = await leaseJobs(db, asks([a, b]), [{ group: 1, models: [model], count: 2 }], 60);
      const leased = new Map(round.rows.map((r) => ['jobId' in r ? r.jobId : '', r.slot]));
      expect(leased.get(first!)).toBe(2);
      expect(leased.get(second!)).toBe(1);
      const holders = await q<{ id: string; node_id: number }>(
        't_holders',
        "SELECT id::text, node_id::int FROM jobs WHERE state = 'leased' ORDER BY submitted_at",
      );
      expect(holders).toEqual([
        { id: first, node_id: b.id },
        { id: second, node_id: a.id },
      ]);
    });
  }

  it('a job no poll of the round may have stays queued; the others are leased', async () => {
    const { nodes, model } = await setup();
    const [a, b] = nodes as [{ id: number; session: number }, { id: number; session: number }];
    const [banned, free] = await queue(model, [[a.id, b.id], []], false);
    const round = await leaseJobs(db, asks([a, b]), [{ group: 1, models: [model], count: 2 }], 60);
    expect(round.rows.map((r) => ('jobId' in r ? r.jobId : null))).toEqual([free]);
    const [state] = await q<{ state: string }>('t_state', 'SELECT state FROM jobs WHERE id = $1::uuid', [banned]);
    expect(state!.state).toBe('queued');
  });
});
