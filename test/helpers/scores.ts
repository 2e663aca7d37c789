// Scores as a worker reports them for a score check (src/worker/score-job.ts), for tests whose
// stub workers score: in line (the checker's top-1 at every position) or foreign (outside its top 10);
// `mismatched`: how many of the positions (the first ones) are outside the top 10, the rest in line.
export const workerScores = (foreign: boolean, positions: number, mismatched = foreign ? positions : 0) => ({
  method: 'prefill', unscored: 0,
  rank: Array.from({ length: positions }, (_, i) => (i < mismatched ? 11 : 1)), logprob: Array.from({ length: positions }, (_, i) => (i < mismatched ? -9 : -0.1)),
  top_logprob: Array(positions).fill(-0.1), gap: Array(positions).fill(2),
});
