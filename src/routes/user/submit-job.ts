// POST /submit_job: a user queues a job for a model. The key is checked before the body (as
// FastAPI's header dependency does): a request without a valid key learns nothing more.
import type { FastifyRequest } from 'fastify';
import { SubmitJobRequest, SubmitJobResponses } from '../../generated/schemas.js';
import { RequestValidationError } from '../../http/validator.js';
import { HttpError } from '../../http/http-error.js';
import { QuotaExceeded, ReserveOverQuota, TooManyModels } from '../../jobs/submit.js';
import { ContextTooLong } from '../../jobs/context.js';
import { MalformedJson, valueError } from '../../validation/pydantic.js';
import { authenticateUser } from '../authenticate.js';
import { asksChecked, BadDeliveryHeader } from '../front/delivery.js';
import type { App, Deps } from '../types.js';

/** A job's temperature when the request gives none. */
export const DEFAULT_TEMPERATURE = 0.7;

declare module 'fastify' {
  interface FastifyRequest {
    userKeyId?: number;
    /** The request's x-ins-delivery asked for checked delivery. */
    checkedDelivery?: boolean;
  }
}

export function submitJobRoute(app: App, deps: Deps): void {
  const { metrics } = deps;
  const { coordinator } = deps.service;
  const coordinatorConfig = deps.service.options.coordinator;
  app.post(
    '/submit_job',
    {
      schema: { body: SubmitJobRequest, response: SubmitJobResponses },
      preValidation: async (req: FastifyRequest) => {
        // FastAPI decodes the body before any dependency: malformed JSON is its 422, key or not.
        if (req.body instanceof MalformedJson) return;
        req.userKeyId = await authenticateUser(deps, req);
        // x-ins-delivery (checked delivery, front/delivery.ts): a bad value is 400, nothing queued.
        try {
          req.checkedDelivery = asksChecked(req);
        } catch (err) {
          if (err instanceof BadDeliveryHeader) throw new HttpError(400, err.message);
          throw err;
        }
      },
    },
    async (req) => {
      const { model, messages, max_output, temperature, seed, request_timeout_time } = req.body;
      const timeout = request_timeout_time ?? coordinatorConfig.jobTimeout;
      if (timeout > coordinatorConfig.maxJobTimeout) {
        throw new RequestValidationError([
          valueError(
            ['body', 'request_timeout_time'],
            `request_timeout_time must be at most ${coordinatorConfig.maxJobTimeout} seconds`,
            request_timeout_time,
          ),
        ]);
      }
      const { id: jobId } = await coordinator
        .submit({
          ownerKeyId: req.userKeyId!,
          model,
          request: {
            messages,
            max_output: max_output ?? 0,
            temperature: temperature ?? DEFAULT_TEMPERATURE,
            ...(seed !== undefined ? { seed } : {}),
          },
          timeoutSeconds: timeout,
          ...(req.checkedDelivery ? { checked: true } : {}),
        })
        .catch((err: unknown) => {
          // Over the key's daily quota: 429 until the next UTC midnight (GET /usage tells how much is left).
          if (err instanceof QuotaExceeded)
            throw new HttpError(429, `Quota exceeded: ${err.message}`, { 'retry-after': String(err.retryAfterSeconds) });
          // A job its key's whole token quota cannot hold: 400, as no later day would take it either.
          if (err instanceof ReserveOverQuota) throw new HttpError(400, `Over the quota: ${err.message}`);
          // Longer than every online node of the model can hold (jobs/context.ts): 400, nothing queued.
          if (err instanceof ContextTooLong) throw new HttpError(400, err.message);
          // Too many new model names today: 429 until the next UTC midnight, as a quota.
          if (err instanceof TooManyModels)
            throw new HttpError(429, `Too many new models: ${err.message}`, { 'retry-after': String(err.retryAfterSeconds) });
          throw err;
        });
      metrics.jobsSubmitted.inc();
      return { status: 'success', job_id: jobId };
    },
  );
}
