// Scores as a worker reports them for a score check (src/worker/score-job.ts), for tests whose
// stub workers score: in line (the checker's top-1 at every position) or foreign (outside its top 10);
// `mismatched`: how many of the positions (the first ones) are outside the top 10, the rest in line.
// The log-probabilities vary by position, the same for every stub scorer (scorers of one model,
// whose scores of an answer rise and fall together: src/verify/token-stats.ts scorersAgree).
export const workerScores = (foreign: boolean, positions: number, mismatched = foreign ? positions : 0) => ({
  method: 'prefill',
  unscored: 0,
  rank: Array.from({ length: positions }, (_, i) => (i < mismatched ? 11 : 1)),
  logprob: Array.from({ length: positions }, (_, i) => (i < mismatched ? -9 - (i % 5) : -0.1 - (i % 3) / 100)),
  top_logprob: Array(positions).fill(-0.1),
  gap: Array(positions).fill(2),
});

/**
 * The tokens a node reported with its answer, in the score checks' requests as the coordinator
 * passes them on (`params.score.tokens`, issue 53): stub nodes answer in text alone, so for the
 * tests of what a scorer that forced the node's tokens may conclude, the queued checks are given
 * the answer's tokens one per character (what the tiny character vocabulary generates). A check
 * without them is judged as one whose scorer re-tokenized the text (src/verify/scores.ts).
 */
export const TOKENS_AS_REPORTED = `UPDATE jobs SET request = jsonb_set(request, '{params,score,tokens}', to_jsonb(regexp_split_to_array(request #>> '{params,score,answer}', '')))
  WHERE state = 'queued' AND request #> '{params,score}' IS NOT NULL AND request #> '{params,score,tokens}' IS NULL`;
