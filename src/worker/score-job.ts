// A score check (issue 31, docs/verification.md "Token-level checks"): a job whose
// `params.score.answer` is another node's answer to the same request. The worker does not
// generate: its backend scores that answer token by token (Backend.score, scoring.ts) and the
// report carries, beside an empty message, `result.scores`: per position the audited token's
// rank and log-probability, the checker's top-1 log-probability and its top-1 − top-2 gap, as
// parallel arrays (a quarter of the JSON of one object per position). Only a session that
// declared `score` for the model is leased such a job (the worker declares it where
// backend.score exists), so the seed's worker never sees one.
import { BackendError, type Backend, type BackendAnswer, type BackendJob } from './backend.js';
import type { AnswerScore, CompactScore } from './scoring.js';
import type { WireToken } from '../validation/answer-tokens.js';

/** Log-probabilities to 1e-4 nats: the statistics need no more, the report stays small. */
const round = (x: number): number => (Number.isFinite(x) ? Math.round(x * 1e4) / 1e4 : x > 0 ? 1e3 : -1e3);

export function compact(s: AnswerScore): CompactScore {
  return {
    method: s.method,
    unscored: s.unscored,
    rank: s.positions.map((p) => p.rank),
    logprob: s.positions.map((p) => round(p.logprob)),
    top_logprob: s.positions.map((p) => round(p.top_logprob)),
    gap: s.positions.map((p) => round(p.gap)),
  };
}

/** Scores `answer` on the backend; the answer to report (no text, usage: the scored tokens as prompt). */
export async function scoreJob(backend: Backend, job: BackendJob, answer: string, tokens?: WireToken[]): Promise<BackendAnswer> {
  // Not declared without it (worker.ts), so only a coordinator that ignored the declaration sends one: the job's fault.
  if (!backend.score) throw new BackendError('this backend cannot score answers', 422, 'this backend cannot score answers');
  const scored = await backend.score(
    {
      model: job.model,
      messages: job.messages,
      max_output: job.max_output,
      temperature: job.temperature,
      ...(job.seed !== undefined ? { seed: job.seed } : {}),
    },
    answer,
    tokens,
  );
  return { content: '', usage: { prompt_tokens: scored.positions.length, completion_tokens: 0 }, scores: compact(scored) };
}
