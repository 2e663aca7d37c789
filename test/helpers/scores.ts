// Scores as a worker reports them for a score check (src/worker/score-job.ts), for tests whose
// stub workers score: in line (the checker's top-1 at every position) or foreign (outside its top 10);
// `mismatched`: how many of the positions (the first ones) are outside the top 10, the rest in line.
// The log-probabilities vary by position, the same for every stub scorer (scorers of one model,
// whose scores of an answer rise and fall together: src/verify/token-stats.ts scorersAgree).
export const workerScores = (foreign: boolean, positions: number, mismatched = foreign ? positions : 0) => ({
  method: 'prefill', unscored: 0,
  rank: Array.from({ length: positions }, (_, i) => (i < mismatched ? 11 : 1)),
  logprob: Array.from({ length: positions }, (_, i) => (i < mismatched ? -9 - (i % 5) : -0.1 - (i % 3) / 100)),
  top_logprob: Array(positions).fill(-0.1), gap: Array(positions).fill(2),
});
