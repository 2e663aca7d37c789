// What an operator sees of a node's token-level checks (issue 31; ins node audit NAME): per
// model, how many of its audited jobs were scored token by token and how many were checked the
// weaker way (a copy compared as text: no node able to score the model was online), and where
// its sequential test stands (verify/scores.ts, token-stats.ts).
import { sql, type Queryable } from '../db/database.js';
import { H } from './token-stats.js';

export interface TokenChecks {
  model: string;
  scored: number;
  copied: number;
  answers: number;
  positions: number;
  mismatches: number;
  /** The test's sum, and the threshold H at which the node is flagged. */
  cusum: number;
  threshold: number;
  flags: number;
  flagged_at: string | null;
}

const VIEW = sql(
  'verify_token_view',
  `SELECT m.name AS model, e.scored, e.copied, e.answers, e.positions::float8 AS positions, e.mismatches::float8 AS mismatches,
    e.cusum, e.flags, to_char(e.flagged_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS flagged_at
  FROM node_token_evidence e JOIN nodes n ON n.id = e.node_id JOIN models m ON m.id = e.model_id WHERE n.name = $1::text ORDER BY m.name`,
);

export async function nodeTokenChecks(db: Queryable, name: string): Promise<TokenChecks[]> {
  const rows = await db.query<Omit<TokenChecks, 'threshold'>>(VIEW, [name]);
  return rows.map((r) => ({ ...r, cusum: Math.round(r.cusum * 1000) / 1000, threshold: Math.round(H * 1000) / 1000 }));
}
