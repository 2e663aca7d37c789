// The inference backends a worker runs jobs on, by their own wire formats:
// - Ollama: GET /api/tags for its models; POST /api/chat with options.num_predict (max_output;
//   0 = the backend's default), options.temperature and options.seed; streamed as NDJSON lines; usage from
//   prompt_eval_count and eval_count.
// - OpenAI-compatible servers (vLLM, llama.cpp server, LM Studio…): GET /v1/models; POST
//   /v1/chat/completions with max_tokens and seed; streamed as server-sent events (eventsource-parser);
//   usage from `usage` (asked for with stream_options.include_usage when streaming).
import { createParser } from 'eventsource-parser';
import type { BackendKind } from './options.js';
import { http, type HttpResponse } from './http.js';

export interface BackendJob { model: string; messages: { role: string; content: string }[]; max_output: number; temperature: number; seed?: number }
export interface BackendAnswer { content: string; usage: { prompt_tokens?: number; completion_tokens?: number } | null }

export interface Backend {
  models(): Promise<string[]>;
  /** Runs the job; onDelta hears the text as it is generated (then the backend is asked to stream). */
  chat(job: BackendJob, onDelta?: (delta: string) => void, signal?: AbortSignal): Promise<BackendAnswer>;
}

export class BackendError extends Error {}

async function call(url: string, init: Parameters<typeof http>[1], what: string): Promise<HttpResponse> {
  let res: HttpResponse;
  try {
    res = await http(url, init);
  } catch (err) {
    throw new BackendError(`${what}: ${(err as Error).message}`);
  }
  if (res.status >= 300) throw new BackendError(`${what}: HTTP ${res.status} ${(await res.text().catch(() => '')).slice(0, 200)}`);
  return res;
}

const count = (v: unknown): number | undefined => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined);

class Ollama implements Backend {
  constructor(private readonly url: string) {}

  async models(): Promise<string[]> {
    const body = (await (await call(`${this.url}/api/tags`, {}, 'ollama /api/tags')).json()) as { models?: { name?: unknown }[] };
    return (body.models ?? []).map((m) => m.name).filter((n): n is string => typeof n === 'string');
  }

  async chat(job: BackendJob, onDelta?: (delta: string) => void, signal?: AbortSignal): Promise<BackendAnswer> {
    const options: Record<string, number> = { temperature: job.temperature };
    if (job.max_output > 0) options.num_predict = job.max_output;
    if (job.seed !== undefined) options.seed = job.seed;
    const res = await call(`${this.url}/api/chat`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal,
      body: JSON.stringify({ model: job.model, messages: job.messages, stream: onDelta !== undefined, options }),
    }, 'ollama /api/chat');
    type Line = { message?: { content?: string }; done?: boolean; prompt_eval_count?: number; eval_count?: number; error?: string };
    const usage = (l: Line) => ({ prompt_tokens: count(l.prompt_eval_count), completion_tokens: count(l.eval_count) });
    if (!onDelta) {
      const body = (await res.json()) as Line;
      if (body.error) throw new BackendError(`ollama: ${body.error}`);
      return { content: body.message?.content ?? '', usage: usage(body) };
    }
    let content = '';
    let last: Line = {};
    let buffer = '';
    for await (const text of res.chunks()) {
      buffer += text;
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl).trim();
        buffer = buffer.slice(nl + 1);
        if (!line) continue;
        last = JSON.parse(line) as Line;
        if (last.error) throw new BackendError(`ollama: ${last.error}`);
        const delta = last.message?.content ?? '';
        if (delta) {
          content += delta;
          onDelta(delta);
        }
      }
    }
    return { content, usage: usage(last) };
  }
}

class OpenAICompatible implements Backend {
  constructor(private readonly url: string) {}

  async models(): Promise<string[]> {
    const body = (await (await call(`${this.url}/v1/models`, {}, 'openai /v1/models')).json()) as { data?: { id?: unknown }[] };
    return (body.data ?? []).map((m) => m.id).filter((n): n is string => typeof n === 'string');
  }

  async chat(job: BackendJob, onDelta?: (delta: string) => void, signal?: AbortSignal): Promise<BackendAnswer> {
    const stream = onDelta !== undefined;
    const res = await call(`${this.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal,
      body: JSON.stringify({
        model: job.model, messages: job.messages, temperature: job.temperature,
        ...(job.max_output > 0 ? { max_tokens: job.max_output } : {}),
        ...(job.seed !== undefined ? { seed: job.seed } : {}),
        ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
      }),
    }, 'openai /v1/chat/completions');
    type Usage = { prompt_tokens?: number; completion_tokens?: number } | null | undefined;
    const usage = (u: Usage) => (u ? { prompt_tokens: count(u.prompt_tokens), completion_tokens: count(u.completion_tokens) } : null);
    if (!stream) {
      const body = (await res.json()) as { choices?: { message?: { content?: string | null } }[]; usage?: Usage };
      return { content: body.choices?.[0]?.message?.content ?? '', usage: usage(body.usage) };
    }
    let content = '';
    let last: Usage = null;
    let failure: string | undefined;
    const parser = createParser({
      onEvent: (event) => {
        if (event.data === '[DONE]') return;
        const chunk = JSON.parse(event.data) as { choices?: { delta?: { content?: string | null } }[]; usage?: Usage; error?: { message?: string } };
        if (chunk.error) failure = chunk.error.message ?? 'error';
        const delta = chunk.choices?.[0]?.delta?.content ?? '';
        if (delta) {
          content += delta;
          onDelta(delta);
        }
        if (chunk.usage) last = chunk.usage;
      },
    });
    for await (const text of res.chunks()) parser.feed(text);
    if (failure) throw new BackendError(`openai: ${failure}`);
    return { content, usage: usage(last) };
  }
}

export function createBackend(kind: BackendKind, url: string): Backend {
  return kind === 'ollama' ? new Ollama(url) : new OpenAICompatible(url);
}
