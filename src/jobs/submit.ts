// Submitting jobs: concurrent submissions share one statement (db/batcher.ts), which inserts
// the jobs queued and tells every server which models got new work (JOBS_CHANNEL), at commit.
import { randomUUID } from 'node:crypto';
import { sql, type Database } from '../db/database.js';
import { Batcher } from '../db/batcher.js';
import { ensureModelId } from '../repositories/models.js';
import { JOBS_CHANNEL } from './channels.js';

export interface JobRequest {
  messages: { role: string; content: string }[];
  /** Most tokens to generate; 0: the node's default. */
  max_output: number;
  temperature: number;
}

export interface Submission { ownerKeyId: number; model: string; request: JobRequest; timeoutSeconds: number }

interface Row { id: string; ownerKeyId: number; modelId: number; request: string; timeout: number }

// $1..$5: ids, owner key ids, model ids, requests, timeouts in seconds (parallel arrays);
// $6 this server's id (jobs/channels.ts).
const SUBMIT = sql('jobs_submit', `WITH submitted AS (
  INSERT INTO jobs (id, owner_key_id, model_id, state, request, deadline_at)
  SELECT q.id, q.owner_key_id, q.model_id, 'queued', q.request, now() + make_interval(secs => q.timeout)
  FROM unnest($1::uuid[], $2::bigint[], $3::integer[], $4::jsonb[], $5::float8[]) AS q(id, owner_key_id, model_id, request, timeout)
  RETURNING model_id),
queued AS (SELECT string_agg(model_id || ':' || n, ',') AS items FROM (SELECT model_id, count(*) AS n FROM submitted GROUP BY model_id) c)
SELECT pg_notify('${JOBS_CHANNEL}', $6::text || ' ' || items) AS notified FROM queued WHERE items IS NOT NULL`);

export class Submitter {
  private readonly batcher: Batcher<Row, undefined>;

  /** onQueued hears how many jobs of each model every committed batch queued (this server's dispatcher, at once). */
  constructor(private readonly db: Database, server: string, private readonly onQueued: (counts: Map<number, number>) => void) {
    this.batcher = new Batcher(async (rows) => {
      await db.query(SUBMIT, [rows.map((r) => r.id), rows.map((r) => r.ownerKeyId), rows.map((r) => r.modelId), rows.map((r) => r.request), rows.map((r) => r.timeout), server]);
      const counts = new Map<number, number>();
      for (const r of rows) counts.set(r.modelId, (counts.get(r.modelId) ?? 0) + 1);
      this.onQueued(counts);
      return rows.map(() => undefined);
    }, { maxBatch: 128, maxInFlight: 2 });
  }

  /** Queues the job; resolves to its id once committed. */
  async submit(s: Submission): Promise<string> {
    const id = randomUUID();
    const modelId = await ensureModelId(this.db, s.model);
    await this.batcher.load({ id, ownerKeyId: s.ownerKeyId, modelId, request: JSON.stringify(s.request), timeout: s.timeoutSeconds });
    return id;
  }
}
