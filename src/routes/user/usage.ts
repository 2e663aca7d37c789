// GET /usage (ours): the user key's usage today (UTC) against its daily quota, in total and per
// model — read from the counter the submit statement checks and raises (key_usage,
// src/jobs/sql/submit.ts), so what it shows is what is enforced.
import { UsageResponses } from '../../generated/schemas.js';
import { HttpError } from '../../http/http-error.js';
import { secondsToUtcMidnight } from '../../jobs/submit.js';
import { authenticateUser } from '../authenticate.js';
import type { App, Deps } from '../types.js';

export function usageRoute(app: App, deps: Deps): void {
  const {
    usage: settler,
    options: { coordinator: c },
  } = deps.service;
  app.get('/usage', { schema: { response: UsageResponses } }, async (req) => {
    const owner = await authenticateUser(deps, req);
    const usage = await settler.today(owner, { jobs: c.quotaJobs ?? null, tokens: c.quotaTokens ?? null });
    if (!usage) throw new HttpError(401, 'Invalid API key');
    return { ...usage, reset_seconds: secondsToUtcMidnight() };
  });
}
