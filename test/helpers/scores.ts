// Scores as a worker reports them for a score check (src/worker/score-job.ts), for tests whose
// stub workers score: in line (the checker's top-1 at every position) or foreign (outside its top 10).
export const workerScores = (foreign: boolean, positions: number) => ({
  method: 'prefill', unscored: 0,
  rank: Array(positions).fill(foreign ? 11 : 1), logprob: Array(positions).fill(foreign ? -9 : -0.1),
  top_logprob: Array(positions).fill(-0.1), gap: Array(positions).fill(2),
});
