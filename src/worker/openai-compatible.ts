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
// The job's OpenAI parameters go as they are (params.ts). Capabilities: sampling, json and
// logprobs are what these servers document for every model; tools (and tool_choice) are probed
// once per model with a one-token request that carries a tool (vLLM refuses it with 400 unless
// it runs with --enable-auto-tool-choice, llama.cpp's server unless with --jinja).
// Text completions (job_data.params.prompt): POST /v1/completions as OpenAI defines it, which
// vLLM and llama.cpp's server serve for every generative model: `completions` is declared for all.
// Issue 53, the answer's tokens (result.tokens): vLLM and llama.cpp's server are asked for
// logprobs (`logprobs: true`, `top_logprobs` 0 for vLLM, 1 for llama.cpp's server, which lists
// none at 0) even where the job did not ask, streamed or not; each entry's `bytes` (else its
// `token`) is a token, and the tokens are reported when their bytes spell the answer exactly.
// The logprobs reach the answer only where the job asked for them. Another server (`plain`) is
// asked for nothing it may refuse: its answers carry no tokens.
import { createParser } from 'eventsource-parser';
import {
  answerTokens,
  call,
  count,
  finishOf,
  pieceOf,
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
import { logprobEntry, newCallId, temperatureOf } from './params.js';
import type { ToolCall } from './chat-wire.js';
import { scoreVllm } from './score-http.js';

const PROBE_TOOL = {
  type: 'function',
  function: { name: 'ins_probe', description: 'A probe of tool support.', parameters: { type: 'object', properties: {} } },
};

export type Dialect = 'vllm' | 'llamacpp' | 'plain';

const VLLM_CONTINUES_SINCE = '0.6.3';
// A text no template produces: the rendered prompt ends with it only when the turn is left open.
const SENTINEL = 'ins-worker prefill probe 7f3a';

type Usage = { prompt_tokens?: number; completion_tokens?: number } | null | undefined;
const usageOf = (u: Usage) => (u ? { prompt_tokens: count(u.prompt_tokens), completion_tokens: count(u.completion_tokens) } : null);

/**
 * The server's root from --backend-url, without OpenAI's `/v1` (or `/v1/`) where it ends so: an
 * OpenAI client is given the base with `/v1`, and operators give the worker the same. The paths
 * here name /v1 themselves (kept, it made `/v1/v1/chat/completions`, a 404), and vLLM's /version
 * and /tokenize and llama.cpp's /apply-template are at the root.
 */
export const serverRoot = (url: string): string => url.replace(/\/+$/, '').replace(/\/v1$/, '');

export class OpenAICompatible implements Backend {
  /** Each model's context length as /v1/models said it (vLLM's max_model_len). */
  private lengths = new Map<string, number>();
  name: string;
  continues: boolean;
  readonly url: string;
  private dialect: Dialect;
  private readonly caps = new Map<string, Promise<string[]>>();

  /** stated: the server named by --backend (vllm, llamacpp), else found by detect(). */
  constructor(
    url: string,
    private readonly stated: Dialect | undefined,
    private readonly mayContinue: boolean,
    private readonly quantization?: string,
  ) {
    this.url = serverRoot(url);
    this.dialect = stated ?? 'plain';
    this.name = stated === 'vllm' ? 'vLLM' : stated === 'llamacpp' ? "llama.cpp's server" : 'an OpenAI-compatible server';
    this.continues = mayContinue && stated !== undefined;
  }

  /** Issue 31: vLLM scores an answer in one prefill (prompt_logprobs, score-http.ts); other servers: not yet. */
  get score(): Backend['score'] {
    return this.dialect === 'vllm' ? (job, answer, tokens) => scoreVllm(this.url, job, answer, tokens) : undefined;
  }

  async detect(): Promise<void> {
    this.caps.clear();
    if (this.stated) return;
    const version = ((await probe(`${this.url}/version`)) as { version?: unknown } | undefined)?.version;
    if (typeof version === 'string') {
      this.dialect = 'vllm';
      this.name = `vLLM ${version}`;
      this.continues = this.mayContinue && versionAtLeast(version, VLLM_CONTINUES_SINCE);
      return;
    }
    const models = await this.models().catch(() => []);
    const rendered = (await probe(`${this.url}/apply-template`, {
      ...(models[0] ? { model: models[0] } : {}),
      messages: [
        { role: 'user', content: 'Say something.' },
        { role: 'assistant', content: SENTINEL },
      ],
    })) as { prompt?: unknown } | undefined;
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
    const body = (await (await call(`${this.url}/v1/models`, {}, 'openai /v1/models')).json()) as {
      data?: { id?: unknown; max_model_len?: unknown }[];
    };
    const data = body.data ?? [];
    // vLLM lists each model's context length as max_model_len (its OpenAI server's ModelCard); others say nothing.
    this.lengths = new Map(
      data.flatMap((m) =>
        typeof m.id === 'string' && typeof m.max_model_len === 'number' && Number.isInteger(m.max_model_len) && m.max_model_len > 0
          ? [[m.id, m.max_model_len] as [string, number]]
          : [],
      ),
    );
    return data.map((m) => m.id).filter((n): n is string => typeof n === 'string');
  }

  /** Issue 53: vLLM's max_model_len of each model, as its /v1/models listed it at the last models() (other servers: none). */
  contextLengths(models: string[]): Promise<Record<string, number>> {
    return Promise.resolve(Object.fromEntries(models.filter((m) => this.lengths.has(m)).map((m) => [m, this.lengths.get(m)!])));
  }

  /** Issue 31: OpenAI's wire says nothing of what a server runs: the operator's --quantization, for every model, or nothing. */
  builds(models: string[]): Promise<Record<string, ModelBuild>> {
    const q = this.quantization;
    return Promise.resolve(q ? Object.fromEntries(models.map((m) => [m, { quantization: q }])) : {});
  }

  capabilities(model: string): Promise<string[]> {
    let known = this.caps.get(model);
    if (!known) {
      known = probe(`${this.url}/v1/chat/completions`, {
        model,
        messages: [{ role: 'user', content: 'ping' }],
        tools: [PROBE_TOOL],
        max_tokens: 1,
      }).then(async (answer) => {
        const embeds = await probe(`${this.url}/v1/embeddings`, { model, input: 'ping' });
        return [
          'sampling',
          'json',
          'logprobs',
          ...(answer !== undefined ? ['tools', 'tool_choice'] : []),
          'completions',
          ...(embeds !== undefined ? ['embeddings'] : []),
        ];
      });
      this.caps.set(model, known);
    }
    return known;
  }

  complete(job: BackendJob, prompt: string, onDelta?: (delta: string) => void, signal?: AbortSignal): Promise<BackendAnswer> {
    return completeOpenAI(this.url, job, prompt, onDelta, signal);
  }

  async embed(job: BackendJob, input: string[], signal?: AbortSignal): Promise<BackendAnswer> {
    const res = await call(
      `${this.url}/v1/embeddings`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        signal,
        body: JSON.stringify({ model: job.model, input, encoding_format: 'float' }),
      },
      'openai /v1/embeddings',
    );
    const body = (await res.json()) as { data?: { index?: number; embedding?: unknown }[]; usage?: Usage };
    const data = [...(body.data ?? [])].sort((a, b) => (a.index ?? 0) - (b.index ?? 0));
    return {
      content: '',
      usage: { prompt_tokens: usageOf(body.usage)?.prompt_tokens, completion_tokens: 0 },
      embeddings: vectorsOf(
        data.map((d) => d.embedding),
        input.length,
        'openai /v1/embeddings',
      ),
    };
  }

  async chat(job: BackendJob, onDelta?: (delta: string) => void, signal?: AbortSignal): Promise<BackendAnswer> {
    const stream = onDelta !== undefined;
    const continuing = job.prefix !== undefined && job.prefix !== '';
    const { messages: whole, temperature: _t, ...params } = job.params ?? {};
    const temperature = temperatureOf(job);
    // The tokens' logprobs, asked of a server known to give them, beside what the job asked (not
    // for a continued answer: its beginning is another node's, so its tokens are not reported).
    const asked = job.params?.logprobs === true;
    const tokenLogprobs =
      this.dialect === 'plain' || asked || continuing ? {} : { logprobs: true, top_logprobs: this.dialect === 'llamacpp' ? 1 : 0 };
    const res = await call(
      `${this.url}/v1/chat/completions`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        signal,
        body: JSON.stringify({
          ...params,
          ...tokenLogprobs,
          model: job.model,
          messages: whole ? prefixed(whole, job.prefix) : withPrefix(job),
          ...(temperature !== undefined ? { temperature } : {}),
          ...(job.max_output > 0 ? { max_tokens: job.max_output } : {}),
          ...(job.seed !== undefined ? { seed: job.seed } : {}),
          ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
          ...(continuing && this.dialect === 'vllm' ? { continue_final_message: true, add_generation_prompt: false } : {}),
        }),
      },
      'openai /v1/chat/completions',
    );
    type Choice = {
      message?: { content?: string | null; tool_calls?: unknown };
      delta?: { content?: string | null; tool_calls?: unknown };
      finish_reason?: string | null;
      logprobs?: { content?: unknown } | null;
    };
    const logprobs: unknown[] = [];
    const pieces: Buffer[] = [];
    const gatherLogprobs = (c: Choice | undefined) => {
      if (!Array.isArray(c?.logprobs?.content)) return;
      for (const e of c.logprobs.content) {
        if (asked) logprobs.push(...logprobEntry(e));
        pieces.push(...pieceOf(e));
      }
    };
    const extras = (content: string, calls: ToolCall[], finish: string | null | undefined): Partial<BackendAnswer> => {
      const tokens = calls.length || continuing ? undefined : answerTokens(pieces, content);
      return {
        ...(calls.length ? { tool_calls: calls, finish_reason: 'tool_calls' as const } : finishOf(finish)),
        ...(asked ? { logprobs } : {}),
        ...(tokens ? { tokens } : {}),
      };
    };
    if (!stream) {
      const body = (await res.json()) as { choices?: Choice[]; usage?: Usage };
      const choice = body.choices?.[0];
      gatherLogprobs(choice);
      const calls = toolCalls(choice?.message?.tool_calls);
      const content = choice?.message?.content ?? '';
      return { content, usage: usageOf(body.usage), ...extras(content, calls, choice?.finish_reason) };
    }
    // Streamed tool calls: per index, the id and name come first, the arguments in pieces.
    const streamed: { id?: string; name?: string; arguments: string }[] = [];
    let finish: string | null | undefined;
    let content = '';
    let last: Usage = null;
    let failure: string | undefined;
    let ended = false;
    const parser = createParser({
      onEvent: (event) => {
        if (event.data === '[DONE]') return void (ended = true);
        const chunk = JSON.parse(event.data) as { choices?: Choice[]; usage?: Usage; error?: { message?: string } };
        if (chunk.error) failure = chunk.error.message ?? 'error';
        const choice = chunk.choices?.[0];
        if (choice?.finish_reason) {
          ended = true;
          finish = choice.finish_reason;
        }
        gatherLogprobs(choice);
        if (Array.isArray(choice?.delta?.tool_calls)) {
          for (const d of choice.delta.tool_calls as { index?: number; id?: string; function?: { name?: string; arguments?: string } }[]) {
            const at = typeof d.index === 'number' ? d.index : streamed.length;
            const c = (streamed[at] ??= { arguments: '' });
            if (d.id) c.id = d.id;
            if (d.function?.name) c.name = d.function.name;
            if (d.function?.arguments) c.arguments += d.function.arguments;
          }
        }
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
    const calls = streamed.flatMap((c): ToolCall[] =>
      c.name ? [{ id: c.id ?? newCallId(), type: 'function', function: { name: c.name, arguments: c.arguments } }] : [],
    );
    return { content, usage: usageOf(last), ...extras(content, calls, finish) };
  }
}

/** POST /v1/completions: the prompt as it is, the job's sampling parameters as OpenAI names them. */
export async function completeOpenAI(
  url: string,
  job: BackendJob,
  prompt: string,
  onDelta?: (delta: string) => void,
  signal?: AbortSignal,
): Promise<BackendAnswer> {
  const p = job.params ?? {};
  const temperature = temperatureOf(job);
  const res = await call(
    `${url}/v1/completions`,
    {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      signal,
      body: JSON.stringify({
        model: job.model,
        prompt,
        ...(temperature !== undefined ? { temperature } : {}),
        ...(job.max_output > 0 ? { max_tokens: job.max_output } : {}),
        ...(job.seed !== undefined ? { seed: job.seed } : {}),
        ...(p.top_p !== undefined ? { top_p: p.top_p } : {}),
        ...(p.stop ? { stop: p.stop } : {}),
        ...(p.presence_penalty !== undefined ? { presence_penalty: p.presence_penalty } : {}),
        ...(p.frequency_penalty !== undefined ? { frequency_penalty: p.frequency_penalty } : {}),
        ...(onDelta ? { stream: true, stream_options: { include_usage: true } } : {}),
      }),
    },
    'openai /v1/completions',
  );
  type Body = { choices?: { text?: string; finish_reason?: string | null }[]; usage?: Usage; error?: { message?: string } };
  if (!onDelta) {
    const body = (await res.json()) as Body;
    return { content: body.choices?.[0]?.text ?? '', usage: usageOf(body.usage), ...finishOf(body.choices?.[0]?.finish_reason) };
  }
  let content = '';
  let usage: Usage = null;
  let finish: string | null | undefined;
  let failure: string | undefined;
  let ended = false;
  const parser = createParser({
    onEvent: (event) => {
      if (event.data === '[DONE]') return void (ended = true);
      const chunk = JSON.parse(event.data) as Body;
      if (chunk.error) failure = chunk.error.message ?? 'error';
      const choice = chunk.choices?.[0];
      if (choice?.finish_reason) {
        ended = true;
        finish = choice.finish_reason;
      }
      if (choice?.text) {
        content += choice.text;
        onDelta(choice.text);
      }
      if (chunk.usage) usage = chunk.usage;
    },
  });
  for await (const text of res.chunks()) parser.feed(text);
  if (failure) throw new BackendError(`openai: ${failure}`);
  if (!ended) throw new BackendError('openai: the answer ended before its finish_reason');
  return { content, usage: usageOf(usage), ...finishOf(finish) };
}

/** OpenAI's tool calls from an answer's message. */
function toolCalls(v: unknown): ToolCall[] {
  if (!Array.isArray(v)) return [];
  return v.flatMap((c: { id?: unknown; function?: { name?: unknown; arguments?: unknown } }): ToolCall[] =>
    typeof c?.function?.name === 'string'
      ? [
          {
            id: typeof c.id === 'string' && c.id ? c.id : newCallId(),
            type: 'function',
            function: {
              name: c.function.name,
              arguments: typeof c.function.arguments === 'string' ? c.function.arguments : JSON.stringify(c.function.arguments ?? {}),
            },
          },
        ]
      : [],
  );
}
