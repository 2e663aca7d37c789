// Inference backends for tests: real HTTP servers speaking the Ollama and OpenAI wire formats as
// their API references define them (GET /api/tags, POST /api/chat with NDJSON streaming; GET
// /v1/models, POST /v1/chat/completions with server-sent events), with deterministic answers:
// "echo(<model>): <last message>", usage = words in, words out.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

export interface FakeBackend {
  url: string;
  kind: 'ollama' | 'openai';
  /** Jobs received (POST chat calls). */
  calls: number;
  /** Slows every answer by this many ms (generation time), sent in pieces when streaming. */
  delayMs: number;
  /** What it answers (answerOf unless a test sets another: test/helpers/behaviours.ts). */
  answer: AnswerFn;
  /** Kills the server and every connection at once, as a crashed backend. */
  kill(): Promise<void>;
  close(): Promise<void>;
}

export type AnswerFn = (model: string, messages: { content: string }[]) => string;
export const answerOf: AnswerFn = (model, messages) => `echo(${model}): ${messages.at(-1)?.content ?? ''}`;
const words = (s: string): number => s.split(/\s+/).filter(Boolean).length;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function body(req: IncomingMessage): Promise<Record<string, unknown>> {
  let text = '';
  for await (const chunk of req) text += String(chunk);
  return JSON.parse(text) as Record<string, unknown>;
}

export async function startFakeBackend(kind: 'ollama' | 'openai', models: string[], port = 0): Promise<FakeBackend> {
  const sockets = new Set<Socket>();
  const b: FakeBackend = { url: '', kind, calls: 0, delayMs: 0, answer: answerOf, kill: async () => {}, close: async () => {} };
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const json = (status: number, v: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(v));
    if (kind === 'ollama' && req.method === 'GET' && req.url === '/api/tags') {
      return json(200, { models: models.map((name) => ({ name, model: name, modified_at: '2026-01-01T00:00:00Z', size: 1, digest: 'sha256:0', details: { format: 'gguf', family: 'llama', parameter_size: '3B', quantization_level: 'Q4_K_M' } })) });
    }
    if (kind === 'openai' && req.method === 'GET' && req.url === '/v1/models') {
      return json(200, { object: 'list', data: models.map((id) => ({ id, object: 'model', created: 1700000000, owned_by: 'test' })) });
    }
    const chat = kind === 'ollama' ? '/api/chat' : '/v1/chat/completions';
    if (req.method !== 'POST' || req.url !== chat) return json(404, { error: 'not found' });
    const r = await body(req);
    const model = String(r.model);
    if (!models.includes(model)) return json(404, kind === 'ollama' ? { error: `model "${model}" not found, try pulling it first` } : { error: { message: 'model not found', type: 'invalid_request_error' } });
    b.calls++;
    const messages = r.messages as { content: string }[];
    const answer = b.answer(model, messages);
    const prompt = messages.map((m) => words(m.content)).reduce((a, c) => a + c, 0);
    const pieces = answer.split(/(?<= )/);
    if (!r.stream) {
      await sleep(b.delayMs);
      if (kind === 'ollama') return json(200, { model, created_at: new Date().toISOString(), message: { role: 'assistant', content: answer }, done_reason: 'stop', done: true, total_duration: 1, prompt_eval_count: prompt, eval_count: words(answer) });
      return json(200, { id: 'chatcmpl-fake', object: 'chat.completion', created: 0, model, choices: [{ index: 0, message: { role: 'assistant', content: answer }, finish_reason: 'stop' }], usage: { prompt_tokens: prompt, completion_tokens: words(answer), total_tokens: prompt + words(answer) } });
    }
    if (kind === 'ollama') {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      for (const piece of pieces) {
        res.write(`${JSON.stringify({ model, created_at: new Date().toISOString(), message: { role: 'assistant', content: piece }, done: false })}\n`);
        await sleep(b.delayMs / pieces.length);
      }
      return res.end(`${JSON.stringify({ model, created_at: new Date().toISOString(), message: { role: 'assistant', content: '' }, done_reason: 'stop', done: true, prompt_eval_count: prompt, eval_count: words(answer) })}\n`);
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = (delta: Record<string, string>, finish: string | null) => `data: ${JSON.stringify({ id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 0, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    res.write(chunk({ role: 'assistant', content: '' }, null));
    for (const piece of pieces) {
      res.write(chunk({ content: piece }, null));
      await sleep(b.delayMs / pieces.length);
    }
    res.write(chunk({}, 'stop'));
    const wantsUsage = (r.stream_options as { include_usage?: boolean } | undefined)?.include_usage;
    if (wantsUsage) res.write(`data: ${JSON.stringify({ id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 0, model, choices: [], usage: { prompt_tokens: prompt, completion_tokens: words(answer), total_tokens: prompt + words(answer) } })}\n\n`);
    res.end('data: [DONE]\n\n');
  };
  const server: Server = createServer((req, res) => void handle(req, res).catch(() => res.destroy()));
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  b.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  b.kill = () => new Promise((resolve) => {
    server.close(() => resolve());
    for (const s of sockets) s.destroy();
  });
  b.close = b.kill;
  return b;
}
