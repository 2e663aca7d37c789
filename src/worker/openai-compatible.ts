// OpenAI-compatible servers (vLLM, llama.cpp's server, LM Studio…): GET /v1/models; POST
// /v1/chat/completions with max_tokens and seed; streamed as server-sent events
// (eventsource-parser); usage from `usage` (asked for with stream_options.include_usage when
// streaming).
// Continuing an answer needs each server's own switch (docs/worker.md):
// - vLLM (0.6.3 and later, vllm-project/vllm#8942): the last message is the assistant's, with
//   `continue_final_message: true` and `add_generation_prompt: false` (vLLM refuses both true;
//   the latter defaults to true). `echo` stays off, so the answer carries only the new text.
// - llama.cpp's server (builds since May 2025, ggml-org/llama.cpp#13174): a last assistant
//   message is a prefill unless the server runs with --no-prefill-assistant; the answer
//   carries only the new text.
// - Others (LM Studio…) document no way: they run the job from the start.
// Which server it is: `--backend vllm|llamacpp` says so; `--backend openai` finds out through
// endpoints the servers document — vLLM's GET /version, llama.cpp's POST /apply-template (the
// prompt it would run, so a server whose prefill is off is seen as such).
import { createParser } from 'eventsource-parser';
import { call, count, probe, versionAtLeast, withPrefix, BackendError, type Backend, type BackendAnswer, type BackendJob } from './backend.js';
import { scoreVllm } from './score-http.js';

export type Dialect = 'vllm' | 'llamacpp' | 'plain';

const VLLM_CONTINUES_SINCE = '0.6.3';
// A text no template produces: the rendered prompt ends with it only when the turn is left open.
const SENTINEL = 'ins-worker prefill probe 7f3a';

type Usage = { prompt_tokens?: number; completion_tokens?: number } | null | undefined;
const usageOf = (u: Usage) => (u ? { prompt_tokens: count(u.prompt_tokens), completion_tokens: count(u.completion_tokens) } : null);

export class OpenAICompatible implements Backend {
  name: string;
  continues: boolean;
  private dialect: Dialect;

  /** stated: the server named by --backend (vllm, llamacpp), else found by detect(). */
  constructor(private readonly url: string, private readonly stated: Dialect | undefined, private readonly mayContinue: boolean) {
    this.dialect = stated ?? 'plain';
    this.name = stated === 'vllm' ? 'vLLM' : stated === 'llamacpp' ? "llama.cpp's server" : 'an OpenAI-compatible server';
    this.continues = mayContinue && stated !== undefined;
  }

  /** Issue 31: vLLM scores an answer in one prefill (prompt_logprobs, score-http.ts); other servers: not yet. */
  get score(): Backend['score'] {
    return this.dialect === 'vllm' ? (job, answer) => scoreVllm(this.url, job, answer) : undefined;
  }

  async detect(): Promise<void> {
    if (this.stated) return;
    const version = ((await probe(`${this.url}/version`)) as { version?: unknown } | undefined)?.version;
    if (typeof version === 'string') {
      this.dialect = 'vllm';
      this.name = `vLLM ${version}`;
      this.continues = this.mayContinue && versionAtLeast(version, VLLM_CONTINUES_SINCE);
      return;
    }
    const models = await this.models().catch(() => []);
    const rendered = await probe(`${this.url}/apply-template`, {
      ...(models[0] ? { model: models[0] } : {}),
      messages: [{ role: 'user', content: 'Say something.' }, { role: 'assistant', content: SENTINEL }],
    }) as { prompt?: unknown } | undefined;
    if (typeof rendered?.prompt === 'string') {
      this.dialect = 'llamacpp';
      const prefills = rendered.prompt.endsWith(SENTINEL);
      this.name = `llama.cpp's server${prefills ? '' : ' (--no-prefill-assistant)'}`;
      this.continues = this.mayContinue && prefills;
      return;
    }
    this.dialect = 'plain';
    this.name = 'an OpenAI-compatible server';
    this.continues = false;
  }

  async models(): Promise<string[]> {
    const body = (await (await call(`${this.url}/v1/models`, {}, 'openai /v1/models')).json()) as { data?: { id?: unknown }[] };
    return (body.data ?? []).map((m) => m.id).filter((n): n is string => typeof n === 'string');
  }

  async chat(job: BackendJob, onDelta?: (delta: string) => void, signal?: AbortSignal): Promise<BackendAnswer> {
    const stream = onDelta !== undefined;
    const continuing = job.prefix !== undefined && job.prefix !== '';
    const res = await call(`${this.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal,
      body: JSON.stringify({
        model: job.model, messages: withPrefix(job), temperature: job.temperature,
        ...(job.max_output > 0 ? { max_tokens: job.max_output } : {}),
        ...(job.seed !== undefined ? { seed: job.seed } : {}),
        ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
        ...(continuing && this.dialect === 'vllm' ? { continue_final_message: true, add_generation_prompt: false } : {}),
      }),
    }, 'openai /v1/chat/completions');
    if (!stream) {
      const body = (await res.json()) as { choices?: { message?: { content?: string | null } }[]; usage?: Usage };
      return { content: body.choices?.[0]?.message?.content ?? '', usage: usageOf(body.usage) };
    }
    let content = '';
    let last: Usage = null;
    let failure: string | undefined;
    let ended = false;
    const parser = createParser({
      onEvent: (event) => {
        if (event.data === '[DONE]') return void (ended = true);
        const chunk = JSON.parse(event.data) as { choices?: { delta?: { content?: string | null }; finish_reason?: string | null }[]; usage?: Usage; error?: { message?: string } };
        if (chunk.error) failure = chunk.error.message ?? 'error';
        const choice = chunk.choices?.[0];
        if (choice?.finish_reason) ended = true;
        const delta = choice?.delta?.content ?? '';
        if (delta) {
          content += delta;
          onDelta(delta);
        }
        if (chunk.usage) last = chunk.usage;
      },
    });
    for await (const text of res.chunks()) parser.feed(text);
    if (failure) throw new BackendError(`openai: ${failure}`);
    if (!ended) throw new BackendError('openai: the answer ended before its finish_reason');
    return { content, usage: usageOf(last) };
  }
}
