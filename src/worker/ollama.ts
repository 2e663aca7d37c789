// Ollama, by its API reference (docs/api.md of ollama/ollama): GET /api/tags for its models
// (and what each is: `digest`, `details.quantization_level`, declared as update_models builds);
// POST /api/chat with options.num_predict (max_output; 0 = the backend's default),
// options.temperature and options.seed; streamed as NDJSON lines; usage from prompt_eval_count
// and eval_count. GET /api/version says which Ollama it is. The job's OpenAI parameters in
// Ollama's form: params.ts. Capabilities: POST /api/show lists the model's (`tools`); `format`
// (json) and the sampling options are every model's; logprobs since Ollama 0.12.11.
// Continuing an answer: /api/chat continues a conversation whose last message is the
// assistant's (the model's template stops after it) since Ollama 0.2.8 (ollama/ollama#5802,
// July 2024); nothing needs setting. The answer then carries only the new text, and eval_count
// counts only its tokens. Builds from source report version 0.0.0: taken as recent.
// Text completions (job_data.params.prompt): POST /api/generate with `raw: true` (the prompt as
// it is, no template), for models whose /api/show `capabilities` lists `completion`; the answer
// is `response`, streamed as NDJSON lines too. Embeddings: POST /api/embed (`input` an array,
// `embeddings` back, `prompt_eval_count`), for models whose /api/show lists `embedding`.
import {
  answerTokens,
  call,
  count,
  pieceOf,
  finishOf,
  prefixed,
  probe,
  vectorsOf,
  versionAtLeast,
  withPrefix,
  BackendError,
  type Backend,
  type BackendAnswer,
  type BackendJob,
  type ModelBuild,
} from './backend.js';
import { logprobEntry, ollamaFields, ollamaMessages, toolCallsFromOllama } from './params.js';
import { OLLAMA_LOGPROBS_SINCE, scoreOllama } from './score-http.js';
import type { HttpResponse } from './http.js';

const CONTINUES_SINCE = '0.2.8';

type Tag = { name?: unknown; digest?: unknown; details?: { quantization_level?: unknown } };
/** A string the coordinator takes as an identifier (update_models `builds`): printable, no spaces, at most `max` characters. */
const ident = (v: unknown, max: number): string | undefined => (typeof v === 'string' && v.length <= max && /^[\x21-\x7e]+$/.test(v) ? v : undefined);

/** /api/tags' digest (hex sha256 of the manifest, named as such) and quantisation of a model. */
function buildOf(m: Tag): ModelBuild {
  const hex = ident(m.digest, 120);
  const digest = hex && /^[0-9a-f]{64}$/.test(hex) ? `sha256:${hex}` : hex;
  const quantization = ident(m.details?.quantization_level, 32);
  return { ...(digest ? { digest } : {}), ...(quantization ? { quantization } : {}) };
}

export class Ollama implements Backend {
  name = 'Ollama';
  continues = false;
  /** What /api/version said (issue 31: scoring needs logprobs, from 0.12.11 on). */
  private version: string | undefined;
  /** What /api/tags says each model is (issue 31). */
  private tags = new Map<string, ModelBuild>();

  constructor(
    readonly url: string,
    private readonly mayContinue: boolean,
  ) {}

  /** Issue 31: resync replay on Ollama's logprobs (score-http.ts); none before 0.12.11, or when the version is unknown. */
  get score(): Backend['score'] {
    return this.logprobs ? (job, answer) => scoreOllama(this.url, job, answer) : undefined;
  }

  /** Its /api/chat gives logprobs, each entry with the token's `bytes` (0.12.11 and later). */
  private get logprobs(): boolean {
    const v = this.version;
    return v !== undefined && (v === '0.0.0' || versionAtLeast(v, OLLAMA_LOGPROBS_SINCE));
  }

  async detect(): Promise<void> {
    const version = ((await probe(`${this.url}/api/version`)) as { version?: unknown } | undefined)?.version;
    this.version = typeof version === 'string' ? version : undefined;
    if (typeof version !== 'string') {
      this.name = 'Ollama (version unknown)';
      this.continues = false;
      return;
    }
    this.name = `Ollama ${version}`;
    this.version = version;
    this.continues = this.mayContinue && (version === '0.0.0' || versionAtLeast(version, CONTINUES_SINCE));
  }

  async models(): Promise<string[]> {
    const body = (await (await call(`${this.url}/api/tags`, {}, 'ollama /api/tags')).json()) as { models?: Tag[] };
    const tags = (body.models ?? []).filter((m): m is Tag & { name: string } => typeof m?.name === 'string');
    this.tags = new Map(tags.map((m) => [m.name, buildOf(m)]));
    return tags.map((m) => m.name);
  }

  /** Issue 31: what /api/tags said of each model at the last models(): its digest and details.quantization_level. */
  builds(models: string[]): Promise<Record<string, ModelBuild>> {
    return Promise.resolve(
      Object.fromEntries(
        models.flatMap((m) => {
          const b = this.tags.get(m);
          return b && (b.digest || b.quantization) ? [[m, b]] : [];
        }),
      ),
    );
  }

  /**
   * Issue 53: a model's num_ctx where its Modelfile sets one (/api/show `parameters`): the
   * context Ollama runs it with. Otherwise nothing is declared: Ollama then runs it with the
   * server's default (OLLAMA_CONTEXT_LENGTH), which /api/show does not say, and the model's
   * trained length (`model_info`'s *.context_length) is not what it holds.
   */
  async contextLengths(models: string[]): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const model of models) {
      const shown = (await probe(`${this.url}/api/show`, { model })) as { parameters?: unknown } | undefined;
      const set = typeof shown?.parameters === 'string' ? /^num_ctx\s+(\d+)\s*$/m.exec(shown.parameters) : null;
      const n = set ? Number(set[1]) : NaN;
      if (Number.isInteger(n) && n > 0) out[model] = n;
    }
    return out;
  }

  async capabilities(model: string): Promise<string[]> {
    const recent = this.version === '0.0.0' || (this.version !== undefined && versionAtLeast(this.version, OLLAMA_LOGPROBS_SINCE));
    const shown = (await probe(`${this.url}/api/show`, { model })) as { capabilities?: unknown } | undefined;
    const listed = Array.isArray(shown?.capabilities) ? shown.capabilities : [];
    // An embedding model (nomic-embed-text: `embedding` alone) generates nothing: it takes no
    // sampling, JSON or logprobs job. A plain chat job of it still fails on Ollama's 400 ("does
    // not support chat"), as the request's error (worker.ts), as Ollama itself answers.
    if (listed.includes('embedding') && !listed.includes('completion')) return ['embeddings'];
    return [
      'sampling',
      'json',
      ...(listed.includes('tools') ? ['tools'] : []),
      ...(recent ? ['logprobs'] : []),
      ...(listed.includes('completion') ? ['completions'] : []),
      ...(listed.includes('embedding') ? ['embeddings'] : []),
    ];
  }

  async chat(job: BackendJob, onDelta?: (delta: string) => void, signal?: AbortSignal): Promise<BackendAnswer> {
    const messages = job.params?.messages ? prefixed(ollamaMessages(job.params.messages), job.prefix) : withPrefix(job);
    const res = await call(
      `${this.url}/api/chat`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        signal,
        // Issue 53: logprobs asked for the answer's tokens too (the job's own fields win where it
        // asked); not for a continued answer, whose beginning is another node's.
        body: JSON.stringify({
          model: job.model,
          messages,
          stream: onDelta !== undefined,
          ...(this.logprobs && !job.prefix ? { logprobs: true } : {}),
          ...ollamaFields(job),
        }),
      },
      'ollama /api/chat',
    );
    type Line = {
      message?: { content?: string; tool_calls?: unknown };
      done?: boolean;
      done_reason?: string;
      prompt_eval_count?: number;
      eval_count?: number;
      error?: string;
      logprobs?: unknown;
    };
    const usage = (l: Line) => ({ prompt_tokens: count(l.prompt_eval_count), completion_tokens: count(l.eval_count) });
    const calls: BackendAnswer['tool_calls'] = [];
    const logprobs: unknown[] = [];
    const pieces: Buffer[] = [];
    const gather = (l: Line) => {
      calls.push(...toolCallsFromOllama(l.message?.tool_calls));
      if (Array.isArray(l.logprobs)) {
        for (const e of l.logprobs) {
          if (job.params?.logprobs) logprobs.push(...logprobEntry(e));
          pieces.push(...pieceOf(e));
        }
      }
    };
    const extras = (l: Line, content: string): Partial<BackendAnswer> => {
      const tokens = calls.length || job.prefix ? undefined : answerTokens(pieces, content);
      return {
        ...(calls.length ? { tool_calls: calls, finish_reason: 'tool_calls' as const } : finishOf(l.done_reason)),
        ...(job.params?.logprobs ? { logprobs } : {}),
        ...(tokens ? { tokens } : {}),
      };
    };
    if (!onDelta) {
      const body = (await res.json()) as Line;
      if (body.error) throw new BackendError(`ollama: ${body.error}`);
      gather(body);
      const content = body.message?.content ?? '';
      return { content, usage: usage(body), ...extras(body, content) };
    }
    let content = '';
    const last = await streamLines<Line>(res, (l) => {
      gather(l);
      const delta = l.message?.content ?? '';
      if (delta) {
        content += delta;
        onDelta(delta);
      }
    });
    return { content, usage: usage(last), ...extras(last, content) };
  }

  async complete(job: BackendJob, prompt: string, onDelta?: (delta: string) => void, signal?: AbortSignal): Promise<BackendAnswer> {
    const { options } = ollamaFields(job);
    const res = await call(
      `${this.url}/api/generate`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        signal,
        body: JSON.stringify({ model: job.model, prompt, raw: true, stream: onDelta !== undefined, options }),
      },
      'ollama /api/generate',
    );
    type Line = { response?: string; done?: boolean; done_reason?: string; prompt_eval_count?: number; eval_count?: number; error?: string };
    const answer = (content: string, l: Line): BackendAnswer => ({
      content,
      usage: { prompt_tokens: count(l.prompt_eval_count), completion_tokens: count(l.eval_count) },
      ...finishOf(l.done_reason),
    });
    if (!onDelta) {
      const body = (await res.json()) as Line;
      if (body.error) throw new BackendError(`ollama: ${body.error}`);
      return answer(body.response ?? '', body);
    }
    let content = '';
    const last = await streamLines<Line>(res, (l) => {
      if (l.response) {
        content += l.response;
        onDelta(l.response);
      }
    });
    return answer(content, last);
  }

  async embed(job: BackendJob, input: string[], signal?: AbortSignal): Promise<BackendAnswer> {
    const res = await call(
      `${this.url}/api/embed`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        signal,
        body: JSON.stringify({ model: job.model, input }),
      },
      'ollama /api/embed',
    );
    const body = (await res.json()) as { embeddings?: unknown; prompt_eval_count?: number; error?: string };
    if (body.error) throw new BackendError(`ollama: ${body.error}`);
    return {
      content: '',
      usage: { prompt_tokens: count(body.prompt_eval_count), completion_tokens: 0 },
      embeddings: vectorsOf(body.embeddings, input.length, 'ollama /api/embed'),
    };
  }
}

/**
 * Reads a streamed Ollama answer (one JSON object a line), handing each line to `each`; answers
 * the last one, which must be `done` (a stream cut before it is the backend's failure).
 */
async function streamLines<L extends { done?: boolean; error?: string }>(res: HttpResponse, each: (line: L) => void): Promise<L> {
  let last: L | undefined;
  let buffer = '';
  for await (const text of res.chunks()) {
    buffer += text;
    let nl: number;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (!line) continue;
      last = JSON.parse(line) as L;
      if (last.error) throw new BackendError(`ollama: ${last.error}`);
      each(last);
    }
  }
  if (!last?.done) throw new BackendError('ollama: the answer ended before done');
  return last;
}
