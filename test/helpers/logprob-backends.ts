// Backends that expose logprobs, for the scoring calls (src/worker/score-http.ts): real HTTP
// servers speaking vLLM's and Ollama's wire as their references define it, whose numbers come
// from a real tiny model (scripts/tiny-gguf.ts) run by llama.cpp in the test's process — so a
// score over the wire can be compared with the same model's own (src/worker/gguf.ts).
// Beside test/helpers/backends.ts (whose fakes answer with fixed text and have no model).
// - vllm: GET /version, GET /v1/models, POST /tokenize ({model, messages,
//   add_generation_prompt, continue_final_message} → {count, tokens, max_model_len}), POST
//   /v1/chat/completions with `prompt_logprobs: k` (→ top-level `prompt_logprobs`: per prompt
//   token null for the first, else {token_id: {logprob, rank, decoded_token}} holding the actual
//   token with its rank in the vocabulary and the top k), `max_tokens` generated greedily;
//   issue 53: with `logprobs: true` (and `top_logprobs: k`), `choices[0].logprobs.content`:
//   per generated token {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}
//   (OpenAI's ChatCompletionTokenLogprob, as vLLM returns it), also streamed (`stream: true`:
//   server-sent chunks, each token's delta with its logprobs, a finish chunk, a usage chunk when
//   `stream_options.include_usage`, then `data: [DONE]`); POST /tokenize with `prompt` (a text,
//   `add_special_tokens`) → its ids; POST /v1/completions with `prompt` a list of token ids (or a
//   text) and `prompt_logprobs: k` → `choices[0].prompt_logprobs` (vLLM's
//   CompletionResponseChoice), the ids taken as they are.
// - ollama: GET /api/version, GET /api/tags, POST /api/chat (stream false) with `logprobs: true,
//   top_logprobs: k` (→ `logprobs: [{token, logprob, bytes, top_logprobs: [{token, logprob}]}]`,
//   Ollama 0.12.11 and later; older versions ignore the fields), a last assistant message
//   continued; `options.num_predict` tokens at most, greedy.
// The prompt is the conversation through the model's chat template (node-llama-cpp's), as
// the gguf backend builds it; an assistant turn that continues is appended as its tokens.
import { createServer, type Server } from 'node:http';
import { resolveChatWrapper, type ChatHistoryItem, type LlamaContext, type LlamaModel, type Token } from 'node-llama-cpp';

import { sharedLlama } from './gguf.js';
import { vocabularyBytes, type Vocabulary } from '../../src/worker/gguf.js';

type Message = { role: string; content: string };

export interface LogprobBackend {
  url: string;
  /** Request bodies, by path. */
  requests: { path: string; body: Record<string, unknown> }[];
  close(): Promise<void>;
}

class TinyRunner {
  private queue: Promise<unknown> = Promise.resolve();
  private readonly vocab: Vocabulary;
  constructor(
    readonly model: LlamaModel,
    private readonly context: LlamaContext,
    private readonly chat: import('node-llama-cpp').ChatWrapper,
  ) {
    const g = (model.fileInfo.metadata as { tokenizer?: { ggml?: { model?: unknown; tokens?: unknown; token_type?: unknown } } }).tokenizer?.ggml;
    this.vocab = vocabularyBytes(g?.model, g?.tokens, g?.token_type)!;
  }

  /** A token's exact bytes (its vocabulary's: a byte token is its byte, not U+FFFD). */
  bytes = (t: Token): number[] => [...(this.vocab.bytes[t] ?? Buffer.alloc(0))];

  static async load(file: string): Promise<TinyRunner> {
    const llama = await sharedLlama();
    const model = await llama.loadModel({ modelPath: file });
    const context = await model.createContext({ sequences: 1, contextSize: 1024, threads: 1 });
    return new TinyRunner(model, context, resolveChatWrapper(model));
  }

  text = (t: Token) => this.model.detokenize([t]);

  /** The conversation's tokens; a last assistant turn that continues is appended as its tokens. */
  tokens(messages: Message[], continueLast: boolean): { tokens: Token[]; open: number } {
    const last = messages.at(-1);
    const base = continueLast && last?.role === 'assistant' ? messages.slice(0, -1) : messages;
    const history: ChatHistoryItem[] = base.map((m) =>
      m.role === 'assistant'
        ? { type: 'model', response: [m.content] }
        : m.role === 'system'
          ? { type: 'system', text: m.content }
          : { type: 'user', text: m.content },
    );
    history.push({ type: 'model', response: [] });
    const open = this.chat.generateContextState({ chatHistory: history }).contextText.tokenize(this.model.tokenizer);
    const tail = continueLast && last?.role === 'assistant' ? this.model.tokenize(last.content, false) : [];
    return { tokens: [...open, ...tail], open: open.length };
  }

  /** One at a time: the context has one sequence. */
  private run<T>(f: () => Promise<T>): Promise<T> {
    const r = this.queue.then(f);
    this.queue = r.catch(() => {});
    return r;
  }

  /** The next-token distribution after each of tokens[from-1 …], sorted from the most likely. */
  distributions(tokens: Token[], from: number): Promise<Map<Token, number>[]> {
    return this.run(async () => {
      const seq = this.context.getSequence();
      try {
        const res = await seq.controlledEvaluate(tokens.map((t, i) => (i >= from - 1 ? [t, { generateNext: { probabilities: true } }] : t)));
        return tokens.slice(from - 1).map((_, k) => res[from - 1 + k]!.next.probabilities!);
      } finally {
        await seq.dispose();
      }
    });
  }

  /** Greedy generation, each token with the distribution it was chosen from. */
  greedy(tokens: Token[], max: number): Promise<{ token: Token; probs: Map<Token, number> }[]> {
    return this.run(async () => {
      const seq = this.context.getSequence();
      const out: { token: Token; probs: Map<Token, number> }[] = [];
      try {
        let input: Parameters<typeof seq.controlledEvaluate>[0] = tokens.map((t, i) =>
          i === tokens.length - 1 ? [t, { generateNext: { probabilities: true } }] : t,
        );
        while (out.length < max) {
          const res = await seq.controlledEvaluate(input);
          const probs = res.at(-1)!.next.probabilities!;
          const token = probs.keys().next().value!;
          if (this.model.isEogToken(token)) break;
          out.push({ token, probs });
          input = [[token, { generateNext: { probabilities: true } }]];
        }
        return out;
      } finally {
        await seq.dispose();
      }
    });
  }

  async dispose(): Promise<void> {
    await this.context.dispose();
    await this.model.dispose();
  }
}

const log = (p: number) => Math.log(Math.max(p, 1e-30));

export async function startLogprobBackend(
  kind: 'vllm' | 'ollama',
  file: string,
  model: string,
  opts: { version?: string } = {},
): Promise<LogprobBackend> {
  const m = await TinyRunner.load(file);
  const version = opts.version ?? (kind === 'vllm' ? '0.10.2' : '0.12.11');
  const ollamaLogprobs = kind === 'ollama' && !/^0\.(\d|1[01])\.|^0\.12\.(\d|10)$/.test(version);
  const requests: LogprobBackend['requests'] = [];
  const json = (res: import('node:http').ServerResponse, status: number, body: unknown) =>
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  const topList = (probs: Map<Token, number>, k: number) => [...probs].slice(0, k).map(([t, p]) => ({ token: m.text(t), logprob: log(p) }));
  /** vLLM's prompt_logprobs: null for the first token, then per token {id: {logprob, rank, decoded_token}}, the actual token with its rank and the top k. */
  const promptLogprobs = async (tokens: Token[], k: number) => {
    const dists = await m.distributions(tokens, 1);
    return [
      null,
      ...tokens.slice(1).map((t, i) => {
        const probs = dists[i]!;
        const ranked = [...probs.keys()];
        const entry: Record<string, { logprob: number; rank: number; decoded_token: string }> = {};
        ranked.slice(0, k).forEach((c, r) => {
          entry[String(c)] = { logprob: log(probs.get(c)!), rank: r + 1, decoded_token: m.text(c) };
        });
        entry[String(t)] = { logprob: log(probs.get(t) ?? 0), rank: ranked.indexOf(t) + 1, decoded_token: m.text(t) };
        return entry;
      }),
    ];
  };

  const server: Server = createServer((req, res) => {
    void (async () => {
      let raw = '';
      for await (const chunk of req) raw += String(chunk);
      const path = (req.url ?? '').split('?')[0]!;
      const body = (raw ? JSON.parse(raw) : {}) as Record<string, unknown>;
      requests.push({ path, body });
      if (kind === 'vllm') {
        if (path === '/version') return json(res, 200, { version });
        if (path === '/v1/models') return json(res, 200, { object: 'list', data: [{ id: model, object: 'model' }] });
        const messages = body.messages as Message[];
        const cont = body.continue_final_message === true;
        if (cont && body.add_generation_prompt !== false)
          return json(res, 400, { object: 'error', message: 'continue_final_message and add_generation_prompt cannot both be true' });
        if (path === '/tokenize') {
          const tokens =
            typeof body.prompt === 'string' ? m.model.tokenize(body.prompt, body.add_special_tokens !== false) : m.tokens(messages, cont).tokens;
          return json(res, 200, { count: tokens.length, tokens, max_model_len: 1024 });
        }
        if (path === '/v1/completions') {
          const tokens = Array.isArray(body.prompt) ? (body.prompt as Token[]) : m.model.tokenize(String(body.prompt), true);
          const k = typeof body.prompt_logprobs === 'number' ? body.prompt_logprobs : undefined;
          const gen = await m.greedy(tokens, typeof body.max_tokens === 'number' ? body.max_tokens : 16);
          return json(res, 200, {
            id: 'cmpl-2',
            object: 'text_completion',
            model,
            choices: [
              {
                index: 0,
                text: m.model.detokenize(gen.map((g) => g.token)),
                finish_reason: 'length',
                ...(k !== undefined ? { prompt_logprobs: await promptLogprobs(tokens, k) } : {}),
              },
            ],
            usage: { prompt_tokens: tokens.length, completion_tokens: gen.length },
          });
        }
        if (path === '/v1/chat/completions') {
          const { tokens } = m.tokens(messages, cont);
          const k = typeof body.prompt_logprobs === 'number' ? body.prompt_logprobs : undefined;
          const promptLp = k !== undefined ? await promptLogprobs(tokens, k) : undefined;
          const max = typeof body.max_tokens === 'number' ? body.max_tokens : 16;
          const gen = await m.greedy(tokens, max);
          const finish = gen.length >= max ? 'length' : 'stop';
          const top = typeof body.top_logprobs === 'number' ? body.top_logprobs : 0;
          const entry = (g: { token: Token; probs: Map<Token, number> }) => ({
            token: m.text(g.token),
            logprob: log(g.probs.get(g.token)!),
            bytes: m.bytes(g.token),
            top_logprobs: [...g.probs].slice(0, top).map(([t, p]) => ({ token: m.text(t), logprob: log(p), bytes: m.bytes(t) })),
          });
          const withLogprobs = body.logprobs === true;
          const usage = { prompt_tokens: tokens.length, completion_tokens: gen.length, total_tokens: tokens.length + gen.length };
          if (body.stream === true) {
            res.writeHead(200, { 'content-type': 'text/event-stream' });
            const send = (chunk: unknown) => res.write(`data: ${JSON.stringify(chunk)}\n\n`);
            const base = { id: 'chatcmpl-1', object: 'chat.completion.chunk', model };
            send({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] });
            // One chunk a token, its text as the detokenizer continues it (a split character waits for its end).
            let sent = '';
            gen.forEach((g, i) => {
              const text = m.model.detokenize(gen.slice(0, i + 1).map((x) => x.token));
              const whole = !text.endsWith('\uFFFD');
              const delta = whole ? text.slice(sent.length) : '';
              if (whole) sent = text;
              send({
                ...base,
                choices: [{ index: 0, delta: { content: delta }, logprobs: withLogprobs ? { content: [entry(g)] } : null, finish_reason: null }],
              });
            });
            send({ ...base, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: finish }] });
            if ((body.stream_options as { include_usage?: boolean } | undefined)?.include_usage) send({ ...base, choices: [], usage });
            res.end('data: [DONE]\n\n');
            return;
          }
          return json(res, 200, {
            id: 'cmpl-1',
            object: 'chat.completion',
            model,
            choices: [
              {
                index: 0,
                message: { role: 'assistant', content: m.model.detokenize(gen.map((g) => g.token)) },
                logprobs: withLogprobs ? { content: gen.map(entry) } : null,
                finish_reason: finish,
              },
            ],
            usage,
            ...(promptLp ? { prompt_logprobs: promptLp } : {}),
          });
        }
      } else {
        if (path === '/api/version') return json(res, 200, { version });
        if (path === '/api/tags') return json(res, 200, { models: [{ name: model }] });
        if (path === '/api/chat') {
          const messages = body.messages as Message[];
          const options = (body.options ?? {}) as { num_predict?: number };
          const { tokens } = m.tokens(messages, messages.at(-1)?.role === 'assistant');
          const gen = await m.greedy(tokens, options.num_predict ?? 64);
          const k = typeof body.top_logprobs === 'number' ? body.top_logprobs : 0;
          return json(res, 200, {
            model,
            done: true,
            message: { role: 'assistant', content: m.model.detokenize(gen.map((g) => g.token)) },
            prompt_eval_count: tokens.length,
            eval_count: gen.length,
            ...(ollamaLogprobs && body.logprobs === true
              ? {
                  logprobs: gen.map((g) => ({
                    token: m.text(g.token),
                    logprob: log(g.probs.get(g.token)!),
                    bytes: m.bytes(g.token),
                    top_logprobs: topList(g.probs, k),
                  })),
                }
              : {}),
          });
        }
      }
      json(res, 404, { error: `no ${path}` });
    })().catch((err: unknown) => json(res, 500, { error: String(err) }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    requests,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await m.dispose();
    },
  };
}
