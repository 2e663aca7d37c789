// A score check's request (issue 31, verify/scores.ts): the checked job's whole request
// (messages, sampling fields, seed) plus the answer to score, needing the `score` capability.
// One construction for every score check (first, second and third scorers', verify/scores.ts),
// so that they cannot differ on the worker wire. (Canaries are ordinary jobs since issue 53:
// verify/canaries.ts.) Issue 53: with the answer's tokens as its node reported them
// (jobs.tokens), `params.score.tokens` beside the answer: the scorer forces exactly those tokens
// rather than re-tokenizing the text (docs/verification.md); without them it re-tokenizes, as
// before, and the check never convicts by itself.
import { CAPABILITIES } from '../jobs/capabilities.js';
import type { JobRequest } from '../jobs/request.js';
import type { WireToken } from '../validation/answer-tokens.js';

export const scoreRequest = (request: JobRequest, answer: string, tokens?: WireToken[]): JobRequest => ({
  ...request,
  needs: CAPABILITIES.score,
  params: { ...request.params, score: { answer, ...(tokens ? { tokens } : {}) } },
});
