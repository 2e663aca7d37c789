// Backends that expose logprobs, for the scoring calls (src/worker/score-http.ts): real HTTP
// servers speaking vLLM's and Ollama's wire as their references define it, whose numbers come
// from a real tiny model (scripts/tiny-gguf.ts) run by llama.cpp in the test's process — so a
// score over the wire can be compared with the same model's own (src/worker/gguf.ts).
// Beside test/helpers/backends.ts (whose fakes answer with fixed text and have no model).
// - vllm: GET /version, GET /v1/models, POST /tokenize ({model, messages,
//   add_generation_prompt, continue_final_message} → {count, tokens, max_model_len}), POST
//   /v1/chat/completions with `prompt_logprobs: k` (→ top-level `prompt_logprobs`: per prompt
//   token null for the first, else {token_id: {logprob, rank, decoded_token}} holding the actual
//   token with its rank in the vocabulary and the top k), `max_tokens` generated greedily.
// - ollama: GET /api/version, GET /api/tags, POST /api/chat (stream false) with `logprobs: true,
//   top_logprobs: k` (→ `logprobs: [{token, logprob, bytes, top_logprobs: [{token, logprob}]}]`,
//   Ollama 0.12.11 and later; older versions ignore the fields), a last assistant message
//   continued; `options.num_predict` tokens at most, greedy.
// The prompt is the conversation through the model's chat template (node-llama-cpp's), as
// the gguf backend builds it; an assistant turn that continues is appended as its tokens.
import { createServer, type Server } from 'node:http';
import { resolveChatWrapper, type ChatHistoryItem, type LlamaContext, type LlamaModel, type Token } from 'node-llama-cpp';

import { sharedLlama } from './gguf.js';

type Message = { role: string; content: string };

export interface LogprobBackend {
  url: string;
  /** Request bodies, by path. */
  requests: { path: string; body: Record<string, unknown> }[];
  close(): Promise<void>;
}

class TinyRunner {
  private queue: Promise<unknown> = Promise.resolve();
  constructor(readonly model: LlamaModel, private readonly context: LlamaContext, private readonly chat: import('node-llama-cpp').ChatWrapper) {}

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
      m.role === 'assistant' ? { type: 'model', response: [m.content] } : m.role === 'system' ? { type: 'system', text: m.content } : { type: 'user', text: m.content });
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
        let input: Parameters<typeof seq.controlledEvaluate>[0] = tokens.map((t, i) => (i === tokens.length - 1 ? [t, { generateNext: { probabilities: true } }] : t));
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

export async function startLogprobBackend(kind: 'vllm' | 'ollama', file: string, model: string, opts: { version?: string } = {}): Promise<LogprobBackend> {
  const m = await TinyRunner.load(file);
  const version = opts.version ?? (kind === 'vllm' ? '0.10.2' : '0.12.11');
  const ollamaLogprobs = kind === 'ollama' && !/^0\.(\d|1[01])\.|^0\.12\.(\d|10)$/.test(version);
  const requests: LogprobBackend['requests'] = [];
  const json = (res: import('node:http').ServerResponse, status: number, body: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  const topList = (probs: Map<Token, number>, k: number) => [...probs].slice(0, k).map(([t, p]) => ({ token: m.text(t), logprob: log(p) }));

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
        if (cont && body.add_generation_prompt !== false) return json(res, 400, { object: 'error', message: 'continue_final_message and add_generation_prompt cannot both be true' });
        if (path === '/tokenize') {
          const { tokens } = m.tokens(messages, cont);
          return json(res, 200, { count: tokens.length, tokens, max_model_len: 1024 });
        }
        if (path === '/v1/chat/completions') {
          const { tokens } = m.tokens(messages, cont);
          const k = typeof body.prompt_logprobs === 'number' ? body.prompt_logprobs : undefined;
          let promptLogprobs: (Record<string, { logprob: number; rank: number; decoded_token: string }> | null)[] | undefined;
          if (k !== undefined) {
            const dists = await m.distributions(tokens, 1);
            promptLogprobs = [null, ...tokens.slice(1).map((t, i) => {
              const probs = dists[i]!;
              const ranked = [...probs.keys()];
              const entry: Record<string, { logprob: number; rank: number; decoded_token: string }> = {};
              ranked.slice(0, k).forEach((c, r) => { entry[String(c)] = { logprob: log(probs.get(c)!), rank: r + 1, decoded_token: m.text(c) }; });
              entry[String(t)] = { logprob: log(probs.get(t) ?? 0), rank: ranked.indexOf(t) + 1, decoded_token: m.text(t) };
              return entry;
            })];
          }
          const gen = await m.greedy(tokens, typeof body.max_tokens === 'number' ? body.max_tokens : 16);
          return json(res, 200, {
            id: 'cmpl-1', object: 'chat.completion', model,
            choices: [{ index: 0, message: { role: 'assistant', content: m.model.detokenize(gen.map((g) => g.token)) }, finish_reason: 'length' }],
            usage: { prompt_tokens: tokens.length, completion_tokens: gen.length },
            ...(promptLogprobs ? { prompt_logprobs: promptLogprobs } : {}),
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
            model, done: true, message: { role: 'assistant', content: m.model.detokenize(gen.map((g) => g.token)) },
            prompt_eval_count: tokens.length, eval_count: gen.length,
            ...(ollamaLogprobs && body.logprobs === true ? {
              logprobs: gen.map((g) => ({ token: m.text(g.token), logprob: log(g.probs.get(g.token)!), bytes: [...Buffer.from(m.text(g.token))], top_logprobs: topList(g.probs, k) })),
            } : {}),
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
      await new Promise<void>((resolve) => { server.close(() => resolve()); server.closeAllConnections(); });
      await m.dispose();
    },
  };
}
