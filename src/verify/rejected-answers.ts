// An answer /v1 could not give its app: it breaks what the request made certain — a strict
// schema, JSON mode, a required tool call (src/routes/openai/answer-shape.ts) — and the app got
// 502 `invalid_answer`. Nobody got what was paid for, so nobody pays: the node's credit for the
// job is taken back (a ledger reversal, reason `invalid_answer`; no strike, since an honest node
// whose model cannot keep a schema fakes nothing) and the owner is given back the tokens the job
// was charged. Before, the node kept its points and the owner paid — once per SDK retry (an
// outside probe: one call, three 502s, three jobs and 27 tokens charged for nothing).
// Once per job: the refund is made only by the transaction whose reversal took the credit (a
// result already reversed, by a strike, is not refunded twice — nor at all: the app had read it).
import { sql, type Database } from '../db/database.js';
import { reverse, type Reversed } from './reversal.js';

// $1 the job: its charged output tokens back to its owner's usage of the job's day, through the
// settler like every charge (src/usage/sql.ts). jobs 0: the job was counted when it finished.
const REFUND = sql('usage_refund_rejected', `INSERT INTO usage_owed (key_id, day, model_id, tokens, jobs)
  SELECT owner_key_id, usage_day, model_id, -(usage ->> 'completion_tokens')::bigint, 0 FROM jobs
  WHERE id = $1::uuid AND state = 'done' AND owner_key_id IS NOT NULL AND usage_day IS NOT NULL
    AND (usage ->> 'completion_tokens')::bigint > 0`);

export const REJECTED_REASON = 'invalid_answer';

/** Takes back the credit of a done job whose answer /v1 rejected, and gives its owner its tokens back; what was reversed. */
export async function rejectAnswer(db: Database, jobId: string): Promise<Reversed> {
  return db.transaction(async (tx) => {
    const r = await reverse(tx, { jobIds: [jobId] }, REJECTED_REASON);
    if (r.results > 0) await tx.query(REFUND, [jobId]);
    return r;
  });
}
