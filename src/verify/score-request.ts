// A score check's request (issue 31, verify/scores.ts): the checked job's whole request
// (messages, sampling fields, seed) plus the answer to score, needing the `score` capability.
// One construction for score checks of fresh answers and for canaries (verify/canaries.ts), so
// that the two cannot differ on the worker wire.
import { CAPABILITIES } from '../jobs/capabilities.js';
import type { JobRequest } from '../jobs/request.js';

export const scoreRequest = (request: JobRequest, answer: string): JobRequest =>
  ({ ...request, needs: CAPABILITIES.score, params: { ...request.params, score: { answer } } });
