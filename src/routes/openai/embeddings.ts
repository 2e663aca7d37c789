// POST /v1/embeddings (docs/openai.md, "Embeddings"): one job for the whole batch, run by a node
// that declared the `embeddings` capability for the model (jobs/capabilities.ts; never the
// seed's worker), answered as OpenAI's `list` of `embedding` objects with usage. The texts travel
// in job_data.params.input; the node reports the vectors as `result.embeddings`, base64 of
// float32s (jobs/answer.ts), which are given as they are for `encoding_format: "base64"` and as
// numbers for "float". `dimensions` is refused: not every backend honours it, and a vector of
// another size than asked would be dropped silently. The job runs through the front doors' core
// (front/run.ts), as every completion's does.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Deps } from '../types.js';
import { CAPABILITIES } from '../../jobs/capabilities.js';
import { invalidRequest, OpenAIError } from './errors.js';
import { given, number, requestBody, storableDeep, userField } from './chat-params.js';
import { admit, runJob } from '../front/run.js';
import { unstreamed, type Done } from '../front/wire.js';
import { OPENAI_DEFAULT_TEMPERATURE, type ChatRequest } from './request.js';
import type { ServedModels } from './models.js';
import type { OpenAIApp } from './context.js';

/** OpenAI's limit on inputs per request. */
const MAX_INPUTS = 2048;

export interface EmbeddingsRequest {
  job: ChatRequest;
  base64: boolean;
}

export function parseEmbeddingsRequest(raw: unknown, limits: { defaultTimeout: number; maxTimeout: number }): EmbeddingsRequest {
  const body = requestBody(raw);
  if (!given(body.input)) throw invalidRequest("Missing required parameter: 'input'.", 'input', 'missing_required_parameter');
  const input = typeof body.input === 'string' ? [body.input] : body.input;
  if (!Array.isArray(input) || !input.every((s) => typeof s === 'string')) {
    throw invalidRequest(
      "Invalid type for 'input': expected a string or an array of strings (token arrays are not supported).",
      'input',
      'invalid_type',
    );
  }
  if (input.length === 0 || input.length > MAX_INPUTS)
    throw invalidRequest(`Invalid 'input': expected 1 to ${MAX_INPUTS} strings.`, 'input', 'invalid_value');
  if (input.some((s) => s.length === 0)) throw invalidRequest("Invalid 'input': an empty string cannot be embedded.", 'input', 'invalid_value');
  storableDeep(input, 'input');
  const format = body.encoding_format ?? 'float';
  if (format !== 'float' && format !== 'base64')
    throw invalidRequest("Invalid value for 'encoding_format': expected 'float' or 'base64'.", 'encoding_format', 'invalid_value');
  if (given(body.dimensions)) {
    throw invalidRequest(
      "Unsupported parameter: 'dimensions' is not supported by this network (the nodes' backends do not all honour it); vectors come in the model's own size.",
      'dimensions',
      'unsupported_parameter',
    );
  }
  userField(body);
  const timeout = number(body, 'request_timeout_time', 1, limits.maxTimeout, false);
  return {
    base64: format === 'base64',
    job: {
      model: body.model,
      messages: input.map((content) => ({ role: 'user', content })),
      maxTokens: 0,
      temperature: OPENAI_DEFAULT_TEMPERATURE,
      params: { input },
      needs: CAPABILITIES.embeddings,
      seed: undefined,
      stream: false,
      includeUsage: false,
      timeoutSeconds: timeout ?? limits.defaultTimeout,
    },
  };
}

/** A vector's bytes (little-endian float32s) as numbers. */
function floats(bytes: Buffer): number[] {
  const out: number[] = [];
  for (let at = 0; at + 4 <= bytes.length; at += 4) out.push(bytes.readFloatLE(at));
  return out;
}

/** The node's vectors as OpenAI's `list` of `embedding` objects: 502 when they are not one vector per input, all of one size, every number finite. */
function embeddingsBody(job: ChatRequest, base64: boolean, done: Done): unknown {
  const vectors = done.answer.embeddings;
  if (vectors?.length !== job.messages.length) {
    // The node's report has no vector per input (jobs/answer.ts keeps only well-formed ones).
    throw new OpenAIError(
      502,
      `The node that ran the job answered ${vectors?.length ?? 0} vectors for ${job.messages.length} inputs.`,
      'server_error',
      null,
      'job_failed',
    );
  }
  // One model's vectors: all of one size, every number finite (JSON has no NaN: it became null).
  const bytes = vectors.map((v) => Buffer.from(v, 'base64'));
  const numbers = bytes.map(floats);
  if (new Set(bytes.map((b) => b.length)).size !== 1 || bytes[0]!.length % 4 !== 0 || numbers.some((n) => n.some((x) => !Number.isFinite(x)))) {
    throw new OpenAIError(
      502,
      'The node that ran the job answered vectors of different sizes, or with numbers that are not finite.',
      'server_error',
      null,
      'job_failed',
    );
  }
  const prompt = done.usage?.prompt_tokens ?? 0;
  return {
    object: 'list',
    data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: base64 ? v : numbers[index]! })),
    model: job.model,
    usage: { prompt_tokens: prompt, total_tokens: prompt },
  };
}

export function embeddingsRoutes(app: OpenAIApp, deps: Deps, served: ServedModels): void {
  const { limiters } = deps;
  const c = deps.service.options.coordinator;
  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    let base64 = false;
    const parse = () => {
      const parsed = parseEmbeddingsRequest(req.body, { defaultTimeout: c.jobTimeout, maxTimeout: c.maxJobTimeout });
      base64 = parsed.base64;
      return parsed.job;
    };
    // One job through the front doors' core (front/run.ts), never streamed.
    const { owner, job } = await admit(deps, served, req, parse, () => ({ param: 'input', what: 'embeddings need' }), false);
    return runJob(deps, reply, owner, job, () => unstreamed((done) => embeddingsBody(job, base64, done)), { shaped: false });
  };

  app.post('/v1/embeddings', limiters.completions ? { preHandler: limiters.completions } : {}, handler);
}
