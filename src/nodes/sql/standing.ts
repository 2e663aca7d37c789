// Transitions of a node's standing (src/verify/standing.ts has the states and when the auditor
// strikes): strike (trusted or probation → probation, or → suspended at VERIFY_STRIKES strikes:
// "suspend"), agree (probation → trusted after VERIFY_PROBATION_AGREEMENTS agreements in a row:
// "cleared"), restore (probation or suspended → trusted: ins node reinstate).
import { sql, type Queryable } from '../../db/database.js';
import { parseItem, type NodeOutcome } from '../outcome.js';
import type { Standing, StrikeKind } from '../states.js';

// $1 node, $2 job, $3 kind, $4 evidence, $5 window (s), $6 strikes that suspend, $7 this
// server's id (empty: unknown). Strikes count within the window and since the node was last
// reinstated. Answers the standing before and after; announces `suspended` when this strike
// suspended the node, else `struck`.
export const STRIKE = sql(
  'nodes_strike',
  `WITH recorded AS (
    INSERT INTO node_strikes (node_id, job_id, kind, evidence) VALUES ($1::bigint, $2::uuid, $3::text, $4::jsonb) RETURNING node_id),
  prior AS (SELECT state, reinstated_at FROM node_standing WHERE node_id = $1::bigint),
  counted AS (SELECT count(*)::int + 1 AS n FROM node_strikes s WHERE s.node_id = $1::bigint
    AND s.at > greatest(now() - make_interval(secs => $5::float8), coalesce((SELECT reinstated_at FROM prior), '-infinity'))),
  next AS (SELECT CASE WHEN (SELECT state FROM prior) = 'suspended' OR (SELECT n FROM counted) >= $6::int THEN 'suspended' ELSE 'probation' END AS state),
  standing AS (
    INSERT INTO node_standing AS r (node_id, state, clean_streak, changed_at)
    SELECT $1::bigint, (SELECT state FROM next), 0, now() FROM recorded
    ON CONFLICT (node_id) DO UPDATE SET state = (SELECT state FROM next), clean_streak = 0,
      changed_at = CASE WHEN r.state <> (SELECT state FROM next) THEN now() ELSE r.changed_at END
    RETURNING coalesce((SELECT state FROM prior), 'trusted') AS before, r.state AS after)
SELECT before, after, nodes_announce($7::text, CASE WHEN after = 'suspended' AND before <> 'suspended' THEN 'suspended' ELSE 'struck' END, $1::bigint, NULL) AS announced
FROM standing`,
);

// $1 node ids (a node once per agreement), $2 agreements in a row that end a probation, $3 this
// server's id, $4 node ids party to a disagreement (a text copy that disagreed, an answer a first
// scorer or a canary found foreign): their run of agreements in a row ends, whatever else the
// batch found, so their jobs are checked at the full rate again (verify/check-rate.ts). Every
// agreement counts; a node whose probation this ends is announced (`cleared`), one row each: on
// probation in the statement's snapshot (`prior`, as the strike reads it) and trusted after the
// upsert. One statement per audit batch.
export const AGREE = sql(
  'nodes_agree',
  `WITH agreed AS (
    SELECT node_id, count(*) FILTER (WHERE agrees)::int AS n, bool_or(NOT agrees) AS doubted
    FROM (SELECT a, true FROM unnest($1::bigint[]) a UNION ALL SELECT d, false FROM unnest($4::bigint[]) d) AS x(node_id, agrees)
    GROUP BY node_id),
  prior AS (SELECT node_id, state FROM node_standing WHERE node_id IN (SELECT node_id FROM agreed)),
  standing AS (
    INSERT INTO node_standing AS r (node_id, agreements, clean_streak)
    SELECT node_id, n, CASE WHEN doubted THEN 0 ELSE n END FROM agreed ORDER BY node_id
    ON CONFLICT (node_id) DO UPDATE SET agreements = r.agreements + EXCLUDED.agreements,
      clean_streak = CASE WHEN r.node_id = ANY($4::bigint[]) THEN 0 ELSE r.clean_streak + EXCLUDED.clean_streak END,
      state = CASE WHEN r.state = 'probation' AND r.clean_streak + EXCLUDED.clean_streak >= $2::int AND NOT r.node_id = ANY($4::bigint[])
        THEN 'trusted' ELSE r.state END,
      changed_at = CASE WHEN r.state = 'probation' AND r.clean_streak + EXCLUDED.clean_streak >= $2::int AND NOT r.node_id = ANY($4::bigint[])
        THEN now() ELSE r.changed_at END
    RETURNING r.node_id, r.state)
SELECT nodes_announce($3::text, 'cleared', s.node_id, NULL) AS announced
FROM standing s JOIN prior p USING (node_id) WHERE p.state = 'probation' AND s.state = 'trusted' ORDER BY s.node_id`,
);

// $1 the node's name, $2 this server's id. A node trusted already: no row, nothing announced.
export const RESTORE = sql(
  'nodes_restore',
  `WITH restored AS (
  UPDATE node_standing r SET state = 'trusted', clean_streak = 0, changed_at = now(), reinstated_at = now()
  FROM nodes n WHERE n.id = r.node_id AND n.name = $1::text AND r.state <> 'trusted' RETURNING r.node_id)
SELECT node_id, nodes_announce($2::text, 'restored', node_id, NULL) AS announced FROM restored`,
);

/**
 * strike (and suspend, at VERIFY_STRIKES strikes), inside verification's transaction `q`
 * (src/verify/): the standing before and after, and the outcome its caller applies (nodes/lifecycle.ts apply())
 * once that commits. Announced as server `server`'s (issue 53; the node lifecycle's id, which
 * verification is given): that server's lifecycle skips the announcement and applies the
 * outcome itself, as for every other transition, so that its metrics count the strike as its
 * own. Empty: unknown — every lifecycle applies it as another's.
 */
export async function strikeNode(
  q: Queryable,
  nodeId: number,
  jobId: string,
  kind: StrikeKind,
  evidence: Record<string, unknown>,
  windowSeconds: number,
  strikesToSuspend: number,
  server = '',
): Promise<{ before: Standing; after: Standing; outcome: NodeOutcome }> {
  const [row] = await q.query<{ before: Standing; after: Standing; announced: string }>(STRIKE, [
    nodeId,
    jobId,
    kind,
    JSON.stringify(evidence),
    windowSeconds,
    strikesToSuspend,
    server,
  ]);
  return { before: row!.before, after: row!.after, outcome: parseItem(row!.announced) };
}

/**
 * One agreement per entry of nodeIds (a node may appear several times), inside verification's
 * transaction `q`, announced as server `server`'s as a strike is: the outcomes (`cleared`) of the
 * nodes whose probation this ended, for its caller to apply once that commits.
 */
export async function agreeNodes(
  q: Queryable,
  nodeIds: readonly number[],
  probationAgreements: number,
  server = '',
  doubted: readonly number[] = [],
): Promise<NodeOutcome[]> {
  if (nodeIds.length === 0 && doubted.length === 0) return [];
  const rows = await q.query<{ announced: string }>(AGREE, [nodeIds, probationAgreements, server, [...new Set(doubted)]]);
  return rows.map((r) => parseItem(r.announced));
}
