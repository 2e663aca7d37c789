// A report of a leased job with its job key (jk_), as update_result and jobs/next take it: checked
// before anything is looked up (a success needs its answer; a success's `tokens` must spell it,
// issue 53), then made the JobReport the coordinator completes (jobs/complete.ts). A report this
// refuses changes nothing: the lease runs on.
import type { UpdateResultRequest } from '../generated/schemas.js';
import { answerOf, hasAnswerMessage, requestErrorOf, usageOf, type Answer } from '../jobs/answer.js';
import { answerTokensOf, type WireToken } from '../validation/answer-tokens.js';
import { jobIdSpelled } from '../jobs/read.js';
import type { JobReport } from '../jobs/complete.js';
import { storableCopy, storableText } from '../validation/pydantic.js';
import { keyKind } from '../keys.js';
import { HttpError } from '../http/http-error.js';

type Body = UpdateResultRequest;

const KEPT = 'nothing was recorded, and the lease runs on: report again without them, or with the tokens of this very text';

/**
 * A report's key and, for a job key's report, its result, storable: a NUL or an unpaired
 * surrogate (a model's odd output) becomes U+FFFD rather than a 422 that stops the seed's worker
 * for hours. A key with such a character is no key (refused as unknown): a key is only ever hashed.
 */
export function storableReport(body: Record<string, unknown>): void {
  if (typeof body.api_key !== 'string') return;
  const key = storableText(body.api_key);
  body.api_key = key;
  if (keyKind(key) === 'job') body.result = storableCopy(body.result);
}

/**
 * The report's result without `tokens` (they are not the answer's: kept for verification only),
 * and the tokens when it is a success whose plain text answer they spell (an error report's are
 * ignored). Tokens that do not spell it: a 400 that changes nothing.
 */
function takeTokens(body: Body, answer: Answer): { result: Record<string, unknown>; tokens?: WireToken[] } {
  const { tokens: raw, ...result } = body.result as Record<string, unknown>;
  if (raw === undefined || body.status !== 'success') return { result };
  if (answer.message.tool_calls?.length)
    throw new HttpError(400, `result.tokens are taken with a plain text answer only, not one with tool calls; ${KEPT}`);
  const taken = answerTokensOf(raw, answer.message.content);
  if ('error' in taken) throw new HttpError(400, `${taken.error}; ${KEPT}`);
  return { result, tokens: taken.tokens };
}

/** The lease's report to complete; 400 (nothing recorded, the lease runs on) for a success without its answer or with tokens that do not spell it. */
export function jobReportOf(body: Body, keyHash: string): JobReport {
  // 400, the refusal that keeps the seed's worker polling; its lease runs on (jobs/answer.ts).
  if (body.status === 'success' && !hasAnswerMessage(body.result)) {
    throw new HttpError(
      400,
      'A success needs the answer in result.message: its text, or {"role", "content"}; nothing was recorded, and the lease runs on: report again with the answer, or the error',
    );
  }
  const answer = answerOf(body.result);
  const { result, tokens } = takeTokens(body, answer);
  // The job under its id's own spelling, whichever the report used (capitals, braces, no hyphens).
  return {
    keyHash,
    jobId: jobIdSpelled(body.job_id) ?? body.job_id,
    modelName: body.model_name,
    status: body.status,
    result,
    answer,
    usage: usageOf(body.usage, result.usage),
    requestError: requestErrorOf(body.status, result),
    ...(tokens ? { tokens } : {}),
  };
}
