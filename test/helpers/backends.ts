// Inference backends for tests: real HTTP servers speaking each backend's wire as its own
// documentation defines it, with deterministic answers: "echo(<model>): <last message>",
// usage = words in, words out.
// - ollama: GET /api/tags, GET /api/version, POST /api/chat (NDJSON when streaming). A last
//   assistant message is continued (Ollama 0.2.8 and later; `version` older: it is an earlier
//   turn, answered anew).
// - vllm: GET /v1/models, GET /version, POST /v1/chat/completions (server-sent events). A last
//   assistant message is continued only with `continue_final_message: true`, which is refused
//   (400) unless `add_generation_prompt` is false (its default is true); `echo` puts the
//   continued message's text before the answer. Before 0.6.3 the switch is an unknown field.
// - llamacpp (llama.cpp's server): GET /v1/models, GET /props, POST /apply-template, POST
//   /v1/chat/completions. A last assistant message is a prefill unless the server runs with
//   --no-prefill-assistant (`prefillAssistant: false`); `rejectPrefill` answers a prefill with
//   400, as it does for a thinking model.
// - openai (any other OpenAI-compatible server, LM Studio…): GET /v1/models, POST
//   /v1/chat/completions; a last assistant message is an earlier turn.
// A continued answer is the rest of the answer the conversation (without its last message)
// gets, after the given beginning; its usage counts only the new words.
// OpenAI parameters (issue 28), as each wire documents them: with tools and `toolCall` set, the
// answer is that call (Ollama: message.tool_calls with object arguments; vLLM and others:
// OpenAI's tool_calls, streamed as deltas with the arguments in pieces); Ollama's `format` or
// OpenAI's `response_format` of a JSON kind: the answer is `{"answer": <text>}`; `logprobs`: one
// entry per piece (Ollama: top-level `logprobs`, OpenAI: choices[].logprobs.content). Ollama's
// POST /api/show lists `capabilities` (`showCapabilities`). `contextLimit`: a prompt of more words
// is refused with 400 in the server's words (vLLM's "maximum context length"). Text completions:
// Ollama's POST /api/generate, OpenAI's POST /v1/completions (see `complete` below); embeddings:
// Ollama's POST /api/embed, OpenAI's POST /v1/embeddings (`embeds`; see `embed` below).
// Tests make them fail mid-answer (`failAfter`), hang (`stallAfter`) or pause until told
// (`pauseAfter`, `resume`), and see requests (`requests`) and clients that hung up (`hungUp`).
// `pauseAfter` and `failAfter` at the same count: the answer waits there until resume(), then
// its connection is cut — so a test can let the first pieces reach the client (a worker sends
// its progress as it comes and drops what is pending when the backend fails) before the node fails.
// resume() lets go of every answer begun before it, paused already or not yet: a test resumes
// once it saw the pieces before the pause, and may see the last of them before the answer has got
// past that piece's generation time (a timer) to its pause; a resume that counted only for answers
// already paused was lost then, and the answer waited until the test timed out
// (worker-continue.test.ts, about 1 run in 30 under load).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { sleep } from './wait.js';

export type FakeKind = 'ollama' | 'vllm' | 'llamacpp' | 'openai';

export interface FakeBackend {
  url: string;
  kind: FakeKind;
  /** The models it serves; a test may change the list. */
  models: string[];
  /** Jobs received (POST chat calls). */
  calls: number;
  /** Bodies of the chat calls, in order. */
  requests: Record<string, unknown>[];
  /** Slows every answer by this many ms (generation time), sent in pieces when streaming. */
  delayMs: number;
  /** What it answers (answerOf unless a test sets another: test/helpers/behaviours.ts). */
  answer: AnswerFn;
  /** A streamed answer's connection is cut after this many pieces (a backend failing mid-answer). */
  failAfter: number | undefined;
  /** The answer stops after this many pieces (0: before any; not streamed: before answering) until the client hangs up. */
  stallAfter: number | undefined;
  /** A streamed answer pauses after this many pieces until resume() (or the client hangs up); one not streamed, before answering. */
  pauseAfter: number | undefined;
  /** Answers that paused so far. */
  paused: number;
  /** Lets the answers begun so far go on: those paused, and those that have yet to reach their pause. */
  resume(): void;
  /** Chat calls whose client hung up before the answer ended. */
  hungUp: number;
  /** llamacpp: a last assistant message is a prefill (as without --no-prefill-assistant). */
  prefillAssistant: boolean;
  /** llamacpp: a prefill is refused with 400 (as for a thinking model). */
  rejectPrefill: boolean;
  /** With tools in the request: the tool call it answers with (instead of text). */
  toolCall: { name: string; arguments: Record<string, unknown> } | undefined;
  /** ollama: POST /api/show's capabilities (default completion, tools). */
  showCapabilities: string[];
  /** OpenAI kinds: POST /v1/embeddings is served (else 404, as a server that embeds nothing); Ollama always serves /api/embed. */
  embeds: boolean;
  /** A prompt of more words than this is refused with 400 (context length). */
  contextLimit: number | undefined;
  /** vLLM's max_model_len, listed with each model on GET /v1/models (issue 53: the worker declares it); absent: not listed. */
  maxModelLen: number | undefined;
  /** Kills the server and every connection at once, as a crashed backend. */
  kill(): Promise<void>;
  close(): Promise<void>;
}

export interface FakeOptions {
  /** ollama: GET /api/version (default 0.11.10); vllm: GET /version (default 0.10.2). */
  version?: string;
  port?: number;
}

export type AnswerFn = (model: string, messages: { content: string }[]) => string;
export const answerOf: AnswerFn = (model, messages) => `echo(${model}): ${messages.at(-1)?.content ?? ''}`;
/** The vector a fake embeds a text as: numbers a float32 holds exactly. */
export const vectorOf = (text: string): number[] => [text.length, words(text), 0.5, -1];
export const words = (s: string): number => s.split(/\s+/).filter(Boolean).length;
/** The pieces a fake streams an answer in: word by word. */
export const piecesOf = (text: string): string[] => text.split(/(?<= )/).filter(Boolean);

type Message = { role: string; content: string };

async function body(req: IncomingMessage): Promise<Record<string, unknown>> {
  let text = '';
  for await (const chunk of req) text += String(chunk);
  return JSON.parse(text) as Record<string, unknown>;
}

const atLeast = (v: string, least: string): boolean => {
  const [a, b] = [v, least].map((x) => x.split('.').map((n) => parseInt(n, 10) || 0));
  for (let i = 0; i < 3; i++) if (a![i] !== b![i]) return (a![i] ?? 0) > (b![i] ?? 0);
  return true;
};

export async function startFakeBackend(kind: FakeKind, models: string[], o: FakeOptions = {}): Promise<FakeBackend> {
  const version = o.version ?? (kind === 'ollama' ? '0.11.10' : '0.10.2');
  const sockets = new Set<Socket>();
  const b: FakeBackend = {
    url: '',
    kind,
    models,
    calls: 0,
    requests: [],
    delayMs: 0,
    answer: answerOf,
    failAfter: undefined,
    stallAfter: undefined,
    hungUp: 0,
    toolCall: undefined,
    showCapabilities: ['completion', 'tools'],
    contextLimit: undefined,
    maxModelLen: undefined,
    embeds: false,
    prefillAssistant: true,
    rejectPrefill: false,
    pauseAfter: undefined,
    paused: 0,
    resume: () => {},
    kill: async () => {},
    close: async () => {},
  };
  // Resolved by the next resume(); each answer waits on the one current when it began.
  let resume = () => {};
  let resumed = new Promise<void>((r) => (resume = r));
  b.resume = () => {
    resume();
    resumed = new Promise<void>((r) => (resume = r));
  };
  const openAi = kind !== 'ollama';
  const render = (messages: Message[], open: boolean) =>
    messages.map((m, i) => `<|im_start|>${m.role}\n${m.content}${open && i === messages.length - 1 ? '' : '<|im_end|>\n'}`).join('') +
    (open ? '' : '<|im_start|>assistant\n');
  const llamaPrefills = (messages: Message[]) => b.prefillAssistant && messages.at(-1)?.role === 'assistant';

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const json = (status: number, v: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(v));
    const refuse = (message: string) =>
      json(400, kind === 'ollama' ? { error: message } : { object: 'error', error: { message, type: 'invalid_request_error', code: 400 }, message });
    if (kind === 'ollama' && req.method === 'GET' && req.url === '/api/tags') {
      return json(200, {
        models: b.models.map((name) => ({
          name,
          model: name,
          modified_at: '2026-01-01T00:00:00Z',
          size: 1,
          digest: 'sha256:0',
          details: { format: 'gguf', family: 'llama', parameter_size: '3B', quantization_level: 'Q4_K_M' },
        })),
      });
    }
    if (kind === 'ollama' && req.method === 'GET' && req.url === '/api/version') return json(200, { version });
    if (kind === 'ollama' && req.method === 'POST' && req.url === '/api/show') {
      const shown = await body(req);
      return b.models.includes(String(shown.model))
        ? json(200, { details: { family: 'llama' }, model_info: {}, capabilities: b.showCapabilities })
        : json(404, { error: `model '${String(shown.model)}' not found` });
    }
    if (openAi && req.method === 'GET' && req.url === '/v1/models') {
      return json(200, {
        object: 'list',
        data: b.models.map((id) => ({
          id,
          object: 'model',
          created: 1700000000,
          owned_by: kind === 'llamacpp' ? 'llamacpp' : 'test',
          ...(b.maxModelLen !== undefined ? { max_model_len: b.maxModelLen } : {}),
        })),
      });
    }
    if (kind === 'vllm' && req.method === 'GET' && req.url === '/version') return json(200, { version });
    if (kind === 'llamacpp' && req.method === 'GET' && req.url === '/props') {
      return json(200, {
        default_generation_settings: { n_ctx: 4096 },
        total_slots: 1,
        model_path: `/models/${b.models[0] ?? 'model'}.gguf`,
        chat_template: '...',
        build_info: 'b6500-0000000',
      });
    }
    if (kind === 'llamacpp' && req.method === 'POST' && req.url === '/apply-template') {
      const messages = (await body(req)).messages as Message[];
      return json(200, { prompt: render(messages, llamaPrefills(messages)) });
    }
    if (req.method === 'POST' && req.url === (kind === 'ollama' ? '/api/generate' : '/v1/completions')) return complete(await body(req), res, json);
    if (req.method === 'POST' && req.url === (kind === 'ollama' ? '/api/embed' : '/v1/embeddings') && (kind === 'ollama' || b.embeds))
      return embed(await body(req), json);
    const chat = kind === 'ollama' ? '/api/chat' : '/v1/chat/completions';
    if (req.method !== 'POST' || req.url !== chat) return json(404, { error: 'not found' });
    const r = await body(req);
    const model = String(r.model);
    if (!b.models.includes(model))
      return json(
        404,
        kind === 'ollama'
          ? { error: `model "${model}" not found, try pulling it first` }
          : { error: { message: 'model not found', type: 'invalid_request_error' } },
      );
    const messages = r.messages as Message[];
    const last = messages.at(-1);
    // Does it continue the last (assistant) message, as its documentation says?
    let continues = false;
    if (kind === 'ollama') continues = last?.role === 'assistant' && atLeast(version, '0.2.8');
    if (kind === 'vllm' && r.continue_final_message === true && atLeast(version, '0.6.3')) {
      if (r.add_generation_prompt !== false) return refuse('Cannot set both `continue_final_message` and `add_generation_prompt` to True.');
      if (last?.role !== 'assistant') return refuse("continue_final_message is set but the final message is not the assistant's");
      continues = true;
    }
    if (kind === 'llamacpp' && llamaPrefills(messages)) {
      if (messages.at(-2)?.role === 'assistant') return refuse('Cannot have 2 or more assistant messages at the end of the list.');
      if (b.rejectPrefill) return refuse('Assistant response prefill is incompatible with enable_thinking.');
      continues = true;
    }
    const promptWords = messages.map((m) => words(m.content ?? '')).reduce((a, c) => a + c, 0);
    if (b.contextLimit !== undefined && promptWords > b.contextLimit) {
      b.calls++;
      b.requests.push(r);
      return refuse(
        `This model's maximum context length is ${b.contextLimit} tokens. However, you requested ${promptWords} tokens in the messages. Please reduce the length of the messages.`,
      );
    }
    b.calls++;
    b.requests.push(r);
    const goOn = resumed;
    let generated: string;
    if (continues) {
      const whole = b.answer(model, messages.slice(0, -1));
      generated = whole.startsWith(last!.content) ? whole.slice(last!.content.length) : whole;
    } else {
      generated = b.answer(model, messages);
    }
    const jsonKind =
      kind === 'ollama'
        ? r.format !== undefined
        : ['json_object', 'json_schema'].includes(String((r.response_format as { type?: unknown } | undefined)?.type));
    if (jsonKind) generated = JSON.stringify({ answer: generated });
    const call = Array.isArray(r.tools) && r.tools.length > 0 && b.toolCall && messages.at(-1)?.role !== 'tool' ? b.toolCall : undefined;
    if (call) generated = '';
    const wantsLogprobs = r.logprobs === true;
    const logprobsOf = (piece: string) => [
      {
        token: piece,
        logprob: -0.5,
        bytes: [...Buffer.from(piece)],
        top_logprobs: Array.from({ length: Number(r.top_logprobs ?? 0) }, (_, i) => ({
          token: `${piece}${i}`,
          logprob: -1 - i,
          bytes: [...Buffer.from(`${piece}${i}`)],
        })),
      },
    ];
    // vLLM's echo: the continued message's text comes first.
    const echoed = kind === 'vllm' && r.echo === true && last?.role === 'assistant' ? last.content : '';
    const prompt = promptWords;
    const usage = { prompt_tokens: prompt, completion_tokens: words(generated), total_tokens: prompt + words(generated) };
    const pieces = piecesOf(generated);
    let finished = false;
    res.on('close', () => {
      if (!finished) b.hungUp++;
    });
    const hangUp = () => new Promise<void>((resolve) => (res.destroyed ? resolve() : res.once('close', () => resolve())));
    if (!r.stream) {
      if (b.stallAfter !== undefined) return hangUp();
      if (b.pauseAfter !== undefined) {
        b.paused++;
        await Promise.race([goOn, hangUp()]);
        if (res.destroyed) return;
      }
      await sleep(b.delayMs);
      finished = true;
      if (kind === 'ollama') {
        return json(200, {
          model,
          created_at: new Date().toISOString(),
          message: {
            role: 'assistant',
            content: generated,
            ...(call ? { tool_calls: [{ function: { name: call.name, arguments: call.arguments } }] } : {}),
          },
          ...(wantsLogprobs ? { logprobs: piecesOf(generated).flatMap(logprobsOf) } : {}),
          done_reason: 'stop',
          done: true,
          total_duration: 1,
          prompt_eval_count: prompt,
          eval_count: words(generated),
        });
      }
      return json(200, {
        id: 'chatcmpl-fake',
        object: 'chat.completion',
        created: 0,
        model,
        choices: [
          {
            index: 0,
            message: {
              role: 'assistant',
              content: call ? null : echoed + generated,
              ...(call
                ? {
                    tool_calls: [
                      { id: 'chatcmpl-tool-1', type: 'function', function: { name: call.name, arguments: JSON.stringify(call.arguments) } },
                    ],
                  }
                : {}),
            },
            logprobs: wantsLogprobs ? { content: piecesOf(generated).flatMap(logprobsOf) } : null,
            finish_reason: call ? 'tool_calls' : 'stop',
          },
        ],
        usage,
      });
    }
    // Streams `pieces`, honouring failAfter and stallAfter; false when the answer went no further.
    const stream = async (write: (piece: string) => void): Promise<boolean> => {
      for (let i = 0; i < pieces.length; i++) {
        if (b.stallAfter === i) return hangUp().then(() => false);
        if (b.pauseAfter === i) {
          b.paused++;
          await Promise.race([goOn, hangUp()]);
        }
        if (res.destroyed) return false;
        if (b.failAfter === i) {
          res.destroy();
          return false;
        }
        write(pieces[i]!);
        await sleep(b.delayMs / pieces.length);
        if (res.destroyed) return false;
      }
      if (b.stallAfter !== undefined && b.stallAfter >= pieces.length) return hangUp().then(() => false);
      if (b.pauseAfter !== undefined && b.pauseAfter >= pieces.length) {
        b.paused++;
        await Promise.race([goOn, hangUp()]);
      }
      if (res.destroyed) return false;
      return true;
    };
    if (kind === 'ollama') {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      if (
        !(await stream((piece) =>
          res.write(
            `${JSON.stringify({ model, created_at: new Date().toISOString(), message: { role: 'assistant', content: piece }, ...(wantsLogprobs ? { logprobs: logprobsOf(piece) } : {}), done: false })}\n`,
          ),
        ))
      )
        return;
      if (call)
        res.write(
          `${JSON.stringify({ model, created_at: new Date().toISOString(), message: { role: 'assistant', content: '', tool_calls: [{ function: { name: call.name, arguments: call.arguments } }] }, done: false })}\n`,
        );
      finished = true;
      return res.end(
        `${JSON.stringify({ model, created_at: new Date().toISOString(), message: { role: 'assistant', content: '' }, done_reason: 'stop', done: true, prompt_eval_count: prompt, eval_count: words(generated) })}\n`,
      );
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = (delta: Record<string, unknown>, finish: string | null, logprobs: unknown = null) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 0, model, choices: [{ index: 0, delta, logprobs, finish_reason: finish }] })}\n\n`;
    res.write(chunk({ role: 'assistant', content: '' }, null));
    if (echoed) res.write(chunk({ content: echoed }, null));
    if (!(await stream((piece) => res.write(chunk({ content: piece }, null, wantsLogprobs ? { content: logprobsOf(piece) } : null))))) return;
    if (call) {
      const args = JSON.stringify(call.arguments);
      res.write(chunk({ tool_calls: [{ index: 0, id: 'chatcmpl-tool-1', type: 'function', function: { name: call.name, arguments: '' } }] }, null));
      for (let i = 0; i < args.length; i += 5) res.write(chunk({ tool_calls: [{ index: 0, function: { arguments: args.slice(i, i + 5) } }] }, null));
    }
    res.write(chunk({}, call ? 'tool_calls' : 'stop'));
    const wantsUsage = (r.stream_options as { include_usage?: boolean } | undefined)?.include_usage;
    if (wantsUsage)
      res.write(`data: ${JSON.stringify({ id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 0, model, choices: [], usage })}\n\n`);
    finished = true;
    res.end('data: [DONE]\n\n');
  };
  // Text completions: Ollama's POST /api/generate (`response`, NDJSON when streaming), OpenAI's
  // POST /v1/completions (`choices[].text`, server-sent events); the answer is answerOf with the prompt as the last message.
  const complete = async (r: Record<string, unknown>, res: ServerResponse, json: (status: number, v: unknown) => void) => {
    const model = String(r.model);
    if (!b.models.includes(model)) return json(404, { error: `model "${model}" not found` });
    b.calls++;
    b.requests.push(r);
    const prompt = String(r.prompt);
    const generated = b.answer(model, [{ content: prompt }]);
    const usage = { prompt_tokens: words(prompt), completion_tokens: words(generated), total_tokens: words(prompt) + words(generated) };
    if (kind === 'ollama') {
      const done = {
        model,
        created_at: new Date().toISOString(),
        response: '',
        done: true,
        done_reason: 'stop',
        prompt_eval_count: usage.prompt_tokens,
        eval_count: usage.completion_tokens,
      };
      if (!r.stream) return json(200, { ...done, response: generated });
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      for (const piece of piecesOf(generated))
        res.write(`${JSON.stringify({ model, created_at: new Date().toISOString(), response: piece, done: false })}\n`);
      return res.end(`${JSON.stringify(done)}\n`);
    }
    const of = (text: string, finish: string | null) => ({
      id: 'cmpl-fake',
      object: 'text_completion',
      created: 0,
      model,
      choices: [{ index: 0, text, logprobs: null, finish_reason: finish }],
    });
    if (!r.stream) return json(200, { ...of(generated, 'stop'), usage });
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const piece of piecesOf(generated)) res.write(`data: ${JSON.stringify(of(piece, null))}\n\n`);
    res.write(`data: ${JSON.stringify(of('', 'stop'))}\n\n`);
    if ((r.stream_options as { include_usage?: boolean } | undefined)?.include_usage)
      res.write(`data: ${JSON.stringify({ ...of('', null), choices: [], usage })}\n\n`);
    res.end('data: [DONE]\n\n');
  };
  // Embeddings: Ollama's POST /api/embed (`embeddings`, `prompt_eval_count`), OpenAI's POST
  // /v1/embeddings (a `list` of `embedding` objects with usage); a text's vector is vectorOf(text).
  const embed = (r: Record<string, unknown>, json: (status: number, v: unknown) => void) => {
    const model = String(r.model);
    if (!b.models.includes(model)) return json(404, { error: `model "${model}" not found` });
    b.calls++;
    b.requests.push(r);
    const input = typeof r.input === 'string' ? [r.input] : (r.input as string[]);
    const tokens = input.reduce((n, text) => n + words(text), 0);
    if (kind === 'ollama')
      return json(200, { model, embeddings: input.map(vectorOf), total_duration: 1, load_duration: 1, prompt_eval_count: tokens });
    return json(200, {
      object: 'list',
      model,
      data: input.map((text, index) => ({ object: 'embedding', index, embedding: vectorOf(text) })),
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  };
  const server: Server = createServer((req, res) => void handle(req, res).catch(() => res.destroy()));
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(o.port ?? 0, '127.0.0.1', resolve));
  b.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  b.kill = () =>
    new Promise((resolve) => {
      server.close(() => resolve());
      for (const s of sockets) s.destroy();
    });
  b.close = b.kill;
  return b;
}
